# What python:3.11-slim gives Airlock's Dockerfile, from Debian bookworm's
# packages on the sandbox's debootstrap root: python3.11 with venv (and pip
# through it), CA certificates, bubblewrap for the local sandbox, and
# PostgreSQL's client tools for backups (pg_dump, pg_restore).
ARG ROOT
FROM ${ROOT}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
# policy-rc.d: no package may start a service while the image is built.
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        python3-venv ca-certificates bubblewrap postgresql-client \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/* \
    && ln -s /usr/bin/python3 /usr/local/bin/python
CMD ["python3"]
