#!/bin/sh
# The lab server image's entrypoint: one step before the postgres image's own (docker-entrypoint.sh).
# When POSTGRES_PASSWORD_FILE names a file that is not there yet (docker/compose.yaml), a random
# password is written to it first: each classroom's cluster gets a superuser password of its own,
# which the postgres image reads from that file when it makes the cluster, and the jupyter
# container reads from the same volume (LABKIT_PASSWORD_FILE). The file is read-only and, like
# the volume it sits in, reachable only by root on the host and by the two containers that mount it.
set -eu
file="${POSTGRES_PASSWORD_FILE:-}"
if [ -n "$file" ] && [ ! -s "$file" ]; then
    mkdir -p "$(dirname "$file")"
    # 32 random bytes as 64 hexadecimal digits: nothing a connection string must quote
    od -An -v -N32 -tx1 /dev/urandom | tr -d ' \n' > "$file.new"
    chmod 0444 "$file.new"
    mv "$file.new" "$file"
fi
exec docker-entrypoint.sh "$@"
