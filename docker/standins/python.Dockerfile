# A stand-in for python:3.12-slim-trixie, for an engine that cannot reach a registry (build.sh): Debian's
# own Python (3.13 on trixie) in a virtual environment whose python and pip come first on PATH, as
# the official image's do. Built on the stand-in Debian root (BASE).
# The building machine's own extra certificate authorities (build.sh copies any from
# /usr/local/share/ca-certificates: a network behind a TLS-inspecting proxy), trusted by pip and npm.
ARG BASE
FROM ${BASE}
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && update-ca-certificates >/dev/null \
    && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:$PATH LANG=C.UTF-8 \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
CMD ["python3"]
