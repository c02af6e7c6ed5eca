# Redis 7 from Debian bookworm's packages, like the official redis image: data
# in /data, listening on every address of the container.
ARG ROOT
FROM ${ROOT}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/* \
    && mkdir -p /data && chown redis:redis /data
WORKDIR /data
USER redis
VOLUME /data
EXPOSE 6379
# The container's network is the boundary, as in the official image.
CMD ["redis-server", "--protected-mode", "no"]
