#!/bin/sh
# The stand-in postgres image's entrypoint (postgres.Dockerfile): as root, hand PGDATA to postgres
# and run again as postgres; the first time, make the cluster with the superuser's password, run
# /docker-entrypoint-initdb.d on a server that listens on its socket only, then start the server.
set -eu
if [ "${1:-}" = postgres ] && [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"
    chown -R postgres:postgres "$PGDATA"
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
        POSTGRES_PASSWORD="$(cat "$POSTGRES_PASSWORD_FILE")"
    fi
    : "${POSTGRES_PASSWORD:?the stand-in image needs POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE}"
    user="${POSTGRES_USER:-postgres}"
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$user" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    printf '%s\n' "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -k /var/run/postgresql" start >/dev/null
    for script in /docker-entrypoint-initdb.d/*; do
        case "$script" in
            *.sh) if [ -x "$script" ]; then "$script"; else . "$script"; fi ;;
            *.sql) psql -v ON_ERROR_STOP=1 --username "$user" --host /var/run/postgresql --dbname postgres -f "$script" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "stand-in entrypoint: cluster made in $PGDATA"
fi
exec "$@"
