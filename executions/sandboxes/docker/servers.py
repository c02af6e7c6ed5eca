"""Long-lived programs that speak on their stdio (MCP servers), run as containers.

``server_command(spec, runtime)`` gives the argv and environment of the attach
program (``attach.py``), which the caller spawns with the pipes it wants: it
creates a container of ``spec.image`` through the engine at ``DOCKER_HOST``
(the Docker gate in the scale deployment), and is that container's stdio.

The container is hardened like a sandbox run's (``check_container_config``
refuses anything less): a non-root user, every capability dropped,
``no-new-privileges``, a read-only root with a scratch ``/work`` and ``/tmp``
(tmpfs, lost when it ends), memory, CPU and process limits, no network at all
(``none``), and nothing of the host: no bind mount, no volume, no device, none
of Airlock's environment (``spec.env`` and ``HOME``/``TMPDIR`` only, beside
the image's own). ``runtime`` is ``runsc`` under the gvisor backend, so the
server sees gVisor's kernel rather than the host's.

An image carries what the server needs, so ``read`` and ``write`` (host paths)
are refused, and so is a ``network`` list: such a server has no network.
"""

from __future__ import annotations

import json
import os
import sys

from ..base import ConfinedServer, SandboxUnavailable, ServerSpec
from .config import GVISOR_HOST_PIDS, SANDBOX_USER, WORK_DIR, check_container_config

ATTACH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attach.py")
SERVER_LABEL = "airlock.server"
# Docker's own client settings, which the attach program needs to reach the engine.
DOCKER_VARIABLES = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONFIG")


def host_config(spec: ServerSpec, runtime: str | None) -> dict:
    """The container's host configuration (the docker SDK's ``create_host_config`` keywords)."""
    limits = spec.limits
    tmpfs = f"rw,nosuid,nodev,size={limits.disk_mb}m"
    uid = SANDBOX_USER.split(":")[0]
    config = {
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"{tmpfs},mode=1777", WORK_DIR: f"{tmpfs},mode=0700,uid={uid},gid={uid}"},
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "nano_cpus": int(1e9),
        "pids_limit": GVISOR_HOST_PIDS if runtime == "runsc" else limits.max_processes,
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "ipc_mode": "private",
        "auto_remove": True,
        "ulimits": [{"Name": "core", "Soft": 0, "Hard": 0}],
        "user": SANDBOX_USER,
    }
    if runtime == "runsc":  # the process count is then capped inside the sandbox
        nproc = limits.max_processes
        config["ulimits"].append({"Name": "nproc", "Soft": nproc, "Hard": nproc})
    if runtime:
        config["runtime"] = runtime
    return config


def server_command(spec: ServerSpec, runtime: str | None) -> ConfinedServer:
    """How to start ``spec`` (which names an image) as a container; ``SandboxUnavailable``
    when it cannot be (the attach program labels it with its owner, itself)."""
    if spec.read or spec.write:
        raise SandboxUnavailable(
            "a server run from an image sees only its container: read and write name host "
            "paths, which it cannot have (put what it needs in the image)"
        )
    if spec.network:
        raise SandboxUnavailable(
            "a server run from an image has no network: a network list is for a server "
            "started from a command on this host"
        )
    config = host_config(spec, runtime)
    check_container_config(config)
    user = config.pop("user")
    labels = {
        "airlock.sandbox": "1",
        "airlock.backend": "gvisor" if runtime == "runsc" else "docker",
        SERVER_LABEL: spec.name,
    }
    env = {"HOME": WORK_DIR, "TMPDIR": "/tmp", **dict(spec.env)}
    container = {
        "image": spec.image,
        "command": list(spec.argv),
        "user": user,
        "hostname": "server",
        "working_dir": WORK_DIR,
        "env": env,
        "labels": labels,
        "host_config": config,
    }
    caller = {name: os.environ[name] for name in DOCKER_VARIABLES if name in os.environ}
    method = "gvisor" if runtime == "runsc" else "docker"
    return ConfinedServer(
        argv=[sys.executable, "-I", ATTACH],
        env={
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            **caller,
            "AIRLOCK_SERVER": json.dumps(container),
        },
        method=method,
        details={"confinement": method, "image": spec.image, "network": []},
    )
