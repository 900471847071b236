# A stand-in for python:3.12-slim, for an engine that cannot reach a registry (build.sh): Debian's
# own Python (3.13 on trixie) in a virtual environment whose python and pip come first on PATH, as
# the official image's do. Built on the stand-in Debian root (BASE).
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:$PATH LANG=C.UTF-8
CMD ["python3"]
