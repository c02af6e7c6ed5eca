"""``python -m dockergate``: the gate, configured from the environment.

``DOCKER_GATE_LISTEN`` (``0.0.0.0:2375``), ``DOCKER_GATE_ENGINE`` (the engine's
socket, ``/var/run/docker.sock``, or ``host:port``), ``SANDBOX_IMAGE``
(``airlock-sandbox:latest``), ``DOCKER_GATE_RUNTIMES`` (runtimes a sandbox may ask
for besides the engine's default: ``runsc``) and ``DOCKER_ACTION_CONTAINERS``
(``targets``; none when empty); ``DOCKER_GATE_SERVER_IMAGES`` (images the MCP
gateway's upstream servers may run from, comma-separated; none when empty) and
``DOCKER_GATE_EGRESS_VOLUME`` (the volume a server's relay may mount: the
gateway's proxy folders; no relay when empty).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from .creates import Policy
from .server import Engine, Gate
from .targets import BadRules, Targets


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"), format="%(levelname)s %(message)s"
    )
    host, _, port = os.environ.get("DOCKER_GATE_LISTEN", "0.0.0.0:2375").rpartition(":")
    engine = os.environ.get("DOCKER_GATE_ENGINE", "/var/run/docker.sock").removeprefix("unix://")
    runtimes = os.environ.get("DOCKER_GATE_RUNTIMES", "runsc")
    try:
        targets = Targets.parse(os.environ.get("DOCKER_ACTION_CONTAINERS", ""))
    except BadRules as exc:
        print(f"dockergate: DOCKER_ACTION_CONTAINERS: {exc}", file=sys.stderr)
        return 2
    policy = Policy(
        image=os.environ.get("SANDBOX_IMAGE", "airlock-sandbox:latest"),
        runtimes=frozenset(r.strip() for r in runtimes.split(",") if r.strip()),
        max_cpus=float(os.cpu_count() or 1),
        server_images=frozenset(
            image.strip()
            for image in os.environ.get("DOCKER_GATE_SERVER_IMAGES", "").split(",")
            if image.strip()
        ),
        egress_volume=os.environ.get("DOCKER_GATE_EGRESS_VOLUME", "").strip(),
    )
    gate = Gate(Engine(engine), policy, targets)

    async def run() -> None:
        server = await gate.serve(host or "0.0.0.0", int(port))
        logging.info(
            "dockergate: listening on %s:%s for the engine at %s; Docker actions on %s",
            host, port, engine, targets.describe(),
        )  # fmt: skip
        async with server:
            await server.serve_forever()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
