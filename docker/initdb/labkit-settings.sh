#!/bin/sh
# Run once by the postgres image when the container makes its cluster (/docker-entrypoint-initdb.d).
# LABKIT_SETTINGS holds postgresql.conf lines for the lab profile (labkit sets it when it starts the
# container; docker/compose.yaml sets it too). They are appended to postgresql.conf, so they win over
# the lines above them, and ALTER SYSTEM (postgresql.auto.conf, read after postgresql.conf) still
# wins over them: lab.set(max_connections=...) works here as on the embedded server. A "-c" option
# on the server's command line would win over ALTER SYSTEM, which is why labkit passes none.
set -eu
if [ -n "${LABKIT_SETTINGS:-}" ]; then
    printf '%s\n' "# the lab profile's settings, from LABKIT_SETTINGS" "$LABKIT_SETTINGS" >> "$PGDATA/postgresql.conf"
fi
