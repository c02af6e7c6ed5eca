"""A sandbox container's create, checked field by field and written out again.

The worker's ``POST /containers/create`` body is read against an allow-list: the
sandbox image and nothing else, a runner command (``python3 -I -S …``), a
non-root user, no environment, Airlock's labels only, and a host configuration
that has every hardening a sandbox has (read-only root, all capabilities
dropped, ``no-new-privileges``, no network or the default bridge, memory, CPU
and process limits, a scratch ``tmpfs`` at ``/tmp`` and ``/work``) and nothing
else: no bind mount or volume, no device, no host namespace, no extra
capability, no other network, no other runtime. A field that is not in the
list must be empty (``null``, ``false``, ``0``, ``""``, ``[]``, ``{}``). What is
forwarded to the engine is the checked body, written out again.

An MCP server's container (labelled ``airlock.server``, from the gateway) is
checked the same way but for three things: its image is one of the operator's
list (``Policy.server_images``, none by default) instead of the sandbox image,
its command is the server's (or the image's own), and it may carry an
environment (the server's settings); its network must be ``none``, or the
network of its relay (``container:<relay>``, which the gate checks is a relay
made by the same client: ``rules.join``).

A relay (labelled ``airlock.relay``) holds the network of a server with a
network list and hands its listening socket to the gateway's proxy: it is a
sandbox container (the sandbox image, a runner command, no network) with one
mount, the volume ``Policy.egress_volume`` (``DOCKER_GATE_EGRESS_VOLUME``),
read-only at ``/egress``; without that setting a relay is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .targets import SANDBOX_LABEL

RUNNER_PREFIX = ["python3", "-I", "-S"]
MAX_MEMORY = 64 * 1024**3
MAX_PIDS = 4096
TMPFS_TARGETS = ("/tmp", "/work")
TMPFS_OPTION = re.compile(
    r"\A(rw|nosuid|nodev|noexec|size=\d+[kmg]?|mode=[0-7]{3,4}|uid=\d+|gid=\d+)\Z"
)
USER = re.compile(r"\A([1-9][0-9]*)(:[1-9][0-9]*)?\Z")


class Refused(Exception):
    """The create is not a sandbox's; the message says which field."""


SERVER_LABEL = "airlock.server"
RELAY_LABEL = "airlock.relay"
RELAY_TARGET = "/egress"
JOINED = re.compile(r"\Acontainer:([A-Za-z0-9][A-Za-z0-9_.-]{0,127})\Z")
ENV_ENTRY = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*=[^\0]*\Z")


@dataclass(frozen=True)
class Policy:
    image: str
    runtimes: frozenset[str]  # besides the engine's default
    max_cpus: float = 64.0
    server_images: frozenset[str] = frozenset()  # what an MCP server's container may run
    egress_volume: str = ""  # the volume a relay may mount (the gateway's proxy folders)


def _empty(value: object) -> bool:
    return value in (None, False, 0, "", [], {})


def _check_rest(section: str, body: dict, checked: set[str]) -> None:
    for key, value in body.items():
        if key not in checked and not _empty(value):
            raise Refused(f"{section}{key} is not allowed in a sandbox container")


def _int(section: str, key: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise Refused(f"{section}{key} must be a number from {low} to {high}, not {value!r}")
    return value


def _is_server(body: dict) -> bool:
    labels = body.get("Labels")
    return isinstance(labels, dict) and SERVER_LABEL in labels and RELAY_LABEL not in labels


def _is_relay(body: dict) -> bool:
    labels = body.get("Labels")
    return isinstance(labels, dict) and RELAY_LABEL in labels


def joined(body: dict) -> str:
    """The container whose network a server's create joins (``container:NAME``), or ""."""
    match = JOINED.match(str((body.get("HostConfig") or {}).get("NetworkMode") or ""))
    return match.group(1) if match and _is_server(body) else ""


def _check_relay(host: dict, policy: Policy) -> None:
    if not policy.egress_volume:
        raise Refused(
            "a relay (an MCP server's network) needs the proxies' volume, which "
            "DOCKER_GATE_EGRESS_VOLUME names: it is not set"
        )
    wanted = {
        "Type": "volume", "Source": policy.egress_volume, "Target": RELAY_TARGET, "ReadOnly": True,
    }  # fmt: skip
    mounts = host.get("Mounts")
    if not isinstance(mounts, list) or len(mounts) != 1 or not isinstance(mounts[0], dict):
        raise Refused(f"HostConfig.Mounts of a relay must be the one volume {wanted}")
    if {key: value for key, value in mounts[0].items() if not _empty(value)} != wanted:
        raise Refused(f"HostConfig.Mounts of a relay must be the one volume {wanted}")


def _check_server(body: dict, policy: Policy) -> None:
    """An MCP server's image, command and environment."""
    image = body.get("Image")
    if image not in policy.server_images:
        allowed = ", ".join(sorted(policy.server_images)) or "none (DOCKER_GATE_SERVER_IMAGES)"
        raise Refused(f"Image {image!r} is not one an MCP server may run from (allowed: {allowed})")
    command = body.get("Cmd") or []
    if not isinstance(command, list) or not all(isinstance(part, str) for part in command):
        raise Refused("Cmd must be a list of strings")
    env = body.get("Env") or []
    if not isinstance(env, list) or not all(
        isinstance(entry, str) and ENV_ENTRY.match(entry) for entry in env
    ):
        raise Refused("Env must be a list of NAME=value")


def _check_top(body: dict, policy: Policy) -> None:
    if _is_server(body):
        _check_server(body, policy)
    elif body.get("Image") != policy.image:
        raise Refused(f"Image must be the sandbox image {policy.image}, not {body.get('Image')!r}")
    else:
        command = body.get("Cmd")
        if (
            not isinstance(command, list)
            or not all(isinstance(part, str) for part in command)
            or command[:3] != RUNNER_PREFIX
        ):
            raise Refused("Cmd must be a sandbox runner (python3 -I -S …)")
    if not USER.match(str(body.get("User") or "")):
        raise Refused(f"User must be a non-root uid[:gid], not {body.get('User')!r}")
    if body.get("Tty"):
        raise Refused("Tty is not allowed in a sandbox container")
    labels = body.get("Labels")
    if not isinstance(labels, dict) or labels.get(SANDBOX_LABEL) != "1":
        raise Refused(f"Labels must carry {SANDBOX_LABEL}=1")
    strange = sorted(key for key in labels if not str(key).startswith("airlock."))
    if strange or not all(isinstance(value, str) for value in labels.values()):
        raise Refused(f"Labels may only be Airlock's (airlock.*), not {strange}")
    for key in ("Hostname", "WorkingDir"):
        if not isinstance(body.get(key) or "", str):
            raise Refused(f"{key} must be text")


def _check_tmpfs(tmpfs: object) -> None:
    if not isinstance(tmpfs, dict):
        raise Refused("HostConfig.Tmpfs must map paths to options")
    for target, options in tmpfs.items():
        if target not in TMPFS_TARGETS:
            raise Refused(
                f"HostConfig.Tmpfs may mount only {', '.join(TMPFS_TARGETS)}, not {target}"
            )
        parts = str(options).split(",")
        bad = [part for part in parts if not TMPFS_OPTION.match(part)]
        if bad or "nosuid" not in parts or "nodev" not in parts:
            raise Refused(f"HostConfig.Tmpfs {target}: options must be nosuid,nodev,size=… ({bad})")


def _check_host(host: object, policy: Policy, kind: str = "") -> None:
    section = "HostConfig."
    if not isinstance(host, dict):
        raise Refused("HostConfig is required")
    memory = _int(section, "Memory", host.get("Memory"), 4 * 1024**2, MAX_MEMORY)
    if host.get("MemorySwap") != memory:
        raise Refused("HostConfig.MemorySwap must equal HostConfig.Memory (no swap)")
    _int(section, "NanoCpus", host.get("NanoCpus"), 1, int(policy.max_cpus * 1e9))
    _int(section, "PidsLimit", host.get("PidsLimit"), 1, MAX_PIDS)
    _int(section, "ShmSize", host.get("ShmSize") or 0, 0, MAX_MEMORY)
    if host.get("ReadonlyRootfs") is not True:
        raise Refused("HostConfig.ReadonlyRootfs must be true")
    network = host.get("NetworkMode")
    if kind == "server":  # or its relay's: rules.join checks which container that is
        if network != "none" and not JOINED.match(str(network)):
            raise Refused(
                "HostConfig.NetworkMode must be none or container:<its relay> for an MCP server"
            )
    elif kind == "relay":
        if network != "none":
            raise Refused("HostConfig.NetworkMode must be none for a relay")
    elif network not in ("none", "bridge"):
        raise Refused(f"HostConfig.NetworkMode must be none or bridge, not {network!r}")
    if host.get("CapDrop") != ["ALL"]:
        raise Refused('HostConfig.CapDrop must be ["ALL"]')
    if host.get("SecurityOpt") not in (["no-new-privileges"], ["no-new-privileges:true"]):
        raise Refused('HostConfig.SecurityOpt must be ["no-new-privileges"] and nothing else')
    if host.get("IpcMode") not in (None, "", "private", "none"):
        raise Refused(f"HostConfig.IpcMode {host.get('IpcMode')!r} is not allowed")
    runtime = host.get("Runtime")
    if runtime not in (None, "") and runtime not in policy.runtimes:
        allowed = ", ".join(sorted(policy.runtimes)) or "none"
        raise Refused(f"HostConfig.Runtime {runtime!r} is not allowed (allowed: {allowed})")
    _check_tmpfs(host.get("Tmpfs") or {})
    ulimits = host.get("Ulimits") or []
    if not isinstance(ulimits, list) or not all(
        isinstance(u, dict) and set(u) <= {"Name", "Soft", "Hard"} for u in ulimits
    ):
        raise Refused("HostConfig.Ulimits must be a list of {Name, Soft, Hard}")
    checked = {
        "Memory", "MemorySwap", "NanoCpus", "PidsLimit", "ShmSize", "ReadonlyRootfs",
        "NetworkMode", "CapDrop", "SecurityOpt", "IpcMode", "Runtime", "Tmpfs", "Ulimits",
        "AutoRemove",
    }  # fmt: skip
    if kind == "relay":
        _check_relay(host, policy)
        checked.add("Mounts")
    _check_rest(section, host, checked)


def check_create(body: object, policy: Policy) -> dict:
    """The create body if it describes a sandbox container, else ``Refused``."""
    if not isinstance(body, dict):
        raise Refused("the body must be a JSON object")
    _check_top(body, policy)
    kind = "relay" if _is_relay(body) else "server" if _is_server(body) else ""
    _check_host(body.get("HostConfig"), policy, kind)
    checked = {
        "Image", "Cmd", "User", "Tty", "Labels", "Hostname", "WorkingDir", "HostConfig",
        "OpenStdin", "StdinOnce", "AttachStdin", "AttachStdout", "AttachStderr",
        "NetworkDisabled",
    }  # fmt: skip
    if kind == "server":
        checked.add("Env")
    _check_rest("", body, checked)
    return {key: value for key, value in body.items() if not _empty(value) or key == "Tty"}
