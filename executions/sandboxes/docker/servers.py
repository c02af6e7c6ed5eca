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
are refused.

A ``network`` list (``api.github.com:443``) gives the server one way out, the
gateway's CONNECT proxy (``egress.Egress``), which opens only what the list
names. The server's container then joins the network of a relay container
(``relay.py``: the sandbox image, hardened alike, with no network but its
loopback and the proxy's folder mounted read-only) instead of having none:
the relay listens on ``127.0.0.1:3128`` there and hands that socket to the
proxy, and the server's ``HTTPS_PROXY`` names it. Nothing else is in that
network. The proxy's folder is a temporary one, bind-mounted, or a folder of
the named volume ``MCP_EGRESS_VOLUME`` (mounted at ``MCP_EGRESS_DIR`` here)
where the engine cannot see this host's paths (the scale deployment, whose
gate refuses bind mounts). Under gVisor (``runsc --network=none``) a
container sees no network but gVisor's own, so a list is refused there.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from pathlib import Path

from django.conf import settings

from ..base import ConfinedServer, SandboxUnavailable, ServerSpec, remove_stale_folders
from ..egress import EGRESS_PORT, Egress, EgressError, parse_all, proxy_variables
from .config import GVISOR_HOST_PIDS, SANDBOX_USER, WORK_DIR, check_container_config

HERE = Path(__file__).resolve().parent
ATTACH = str(HERE / "attach.py")
RELAY = (HERE / "relay.py").read_text()
SERVER_LABEL = "airlock.server"
RELAY_LABEL = "airlock.relay"
RELAY_MOUNT = "/egress"  # where the relay sees the proxy's folder (or the volume)
RELAY_MEMORY_MB = 32
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
    try:
        entries = parse_all(list(spec.network))
    except EgressError as exc:
        raise SandboxUnavailable(f"network: {exc}") from exc
    if entries and runtime == "runsc":
        raise SandboxUnavailable(
            "under gVisor a server's container has no network but gVisor's own (runsc runs "
            "with --network=none), so it cannot reach the proxy its network list needs: run "
            "it with the docker backend, or from a command on this host"
        )
    config = host_config(spec, runtime)
    check_container_config(config)
    user = config.pop("user")
    labels = {
        "airlock.sandbox": "1",
        "airlock.backend": "gvisor" if runtime == "runsc" else "docker",
        SERVER_LABEL: spec.name,
    }
    env = {"HOME": WORK_DIR, "TMPDIR": "/tmp", **(proxy_variables() if entries else {})}
    env |= dict(spec.env)
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
    egress = None
    if entries:
        egress, container["relay"] = _relay(spec, entries, labels, runtime)
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
        details={
            "confinement": method,
            "image": spec.image,
            "network": [str(entry) for entry in entries],
        },
        cleanups=[egress.close] if egress else [],
    )


def _relay(spec: ServerSpec, entries, labels: dict, runtime: str | None) -> tuple[Egress, dict]:
    """The proxy of ``spec``'s list, in this process, and the relay container that holds
    the server's network and hands its listening socket to that proxy."""
    volume = getattr(settings, "MCP_EGRESS_VOLUME", "")
    parent = getattr(settings, "MCP_EGRESS_DIR", "") if volume else None
    if volume and not parent:
        raise SandboxUnavailable(
            "MCP_EGRESS_VOLUME is set: set MCP_EGRESS_DIR, where it is mounted"
        )
    # Named by host and pid: a process that died leaves its folder, which the next start on
    # the same host (web containers sharing the volume each have their own) removes.
    prefix = f"airlock-egress-{socket.gethostname()}@"
    remove_stale_folders(parent or tempfile.gettempdir(), prefix)
    try:
        egress = Egress(
            spec.name, entries, prefix=f"{prefix}{os.getpid()}-", parent=parent, shared=True
        )
    except OSError as exc:
        raise SandboxUnavailable(f"the proxy's folder could not be made: {exc}") from exc
    # The relay sees the volume (the proxy's folder is one of its folders), or the folder.
    source, inside = (
        (volume, f"{RELAY_MOUNT}/{os.path.basename(egress.directory)}")
        if volume
        else (egress.directory, RELAY_MOUNT)
    )
    mount = {"Type": "volume" if volume else "bind", "Source": source, "Target": RELAY_MOUNT,
             "ReadOnly": True}  # fmt: skip
    socket_path = f"{inside}/{os.path.basename(egress.socket_path)}"
    config = host_config(spec, runtime)
    config |= {
        "mem_limit": f"{RELAY_MEMORY_MB}m",
        "memswap_limit": f"{RELAY_MEMORY_MB}m",
        "pids_limit": 8,
        "tmpfs": {},
        "mounts": [mount],
    }
    check_container_config(config)
    user = config.pop("user")
    relay = {
        "image": getattr(settings, "SANDBOX_IMAGE", "airlock-sandbox:latest"),
        "command": ["python3", "-I", "-S", "-c", RELAY, str(EGRESS_PORT), socket_path],
        "user": user,
        "hostname": "server",
        "working_dir": "/",
        "env": {},
        "labels": {**labels, RELAY_LABEL: "1"},
        "host_config": config,
    }
    return egress, relay
