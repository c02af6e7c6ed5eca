# PostgreSQL 15 from Debian bookworm's packages, with the official postgres
# image's contract: POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB on first
# start, data in /var/lib/postgresql/data, pg_isready on the PATH.
ARG ROOT
FROM ${ROOT}
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 PGDATA=/var/lib/postgresql/data
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 \
    && (pg_dropcluster 15 main 2>/dev/null || true) \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/* \
    && mkdir -p "$PGDATA" /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 700 "$PGDATA"
COPY postgres-entrypoint /usr/local/bin/docker-entrypoint.sh
USER postgres
VOLUME /var/lib/postgresql/data
EXPOSE 5432
# Fast shutdown: a smart one would wait for every pooled client to leave.
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
