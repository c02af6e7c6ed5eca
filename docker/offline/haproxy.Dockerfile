# HAProxy 2.6 from Debian bookworm's packages, like the official haproxy image:
# the configuration at /usr/local/etc/haproxy/haproxy.cfg, run in the foreground.
ARG ROOT
FROM ${ROOT}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends haproxy \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/* \
    && mkdir -p /usr/local/etc/haproxy
USER haproxy
# Graceful: finish the requests in flight, as the official image stops.
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
