"""The container configuration check: what no setting or option may turn on."""

from __future__ import annotations

import os
from typing import Any

from ..base import SandboxError

SANDBOX_USER = "10001:10001"
WORK_DIR = "/work"  # a container's scratch dir (a tmpfs), its working dir
# gVisor's sentry runs as Go threads in the container's host cgroup: a tight pids
# limit there crashes the sentry, so under gVisor a container's process count is
# capped inside the sandbox (RLIMIT_NPROC, which gVisor counts per sandbox).
GVISOR_HOST_PIDS = 2048
RUNNER_PROCESSES = 4  # the runner's own processes, on top of what the code may start
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


class SandboxConfigRefused(SandboxError):
    """The container configuration would break isolation; refused whatever the settings say."""


def _docker_socket_paths() -> set[str]:
    paths = set(DOCKER_SOCKETS)
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        paths.add(host[len("unix://") :])
    return paths | {os.path.realpath(p) for p in paths}


def _mount_sources(config: dict) -> list[str]:
    sources: list[str] = []
    binds = config.get("binds") or []
    if isinstance(binds, dict):
        sources += list(binds)
    else:
        sources += [str(b).split(":", 1)[0] for b in binds]
    for mount in config.get("mounts") or []:
        source = mount.get("Source") if isinstance(mount, dict) else None
        if source:
            sources.append(str(source))
    for volume in config.get("volumes") or []:
        sources.append(str(volume).split(":", 1)[0])
    return [s for s in sources if s.startswith("/")]


def _exposes_docker_socket(source: str, sockets: set[str]) -> bool:
    resolved = {source, os.path.realpath(source)}
    for path in resolved:
        if path.endswith("docker.sock"):
            return True
        prefix = path.rstrip("/") + "/"
        if any(sock == path or sock.startswith(prefix) for sock in sockets):
            return True  # a parent directory of the socket carries it along
    return False


def _namespace_is_shared(value: Any) -> bool:
    text = str(value or "").lower()
    return text == "host" or text.startswith("container:")


def check_container_config(config: dict) -> None:
    """Refuse any container configuration that would weaken isolation.

    ``config`` holds the host-config and create keywords together. Runs at
    configuration load (``DockerSandbox.__init__``) and again before every
    create, so neither settings nor constructor options can slip one through.
    """
    problems = []
    if config.get("privileged"):
        problems.append("privileged containers")
    if config.get("cap_add"):
        problems.append(f"added capabilities {config['cap_add']}")
    if _namespace_is_shared(config.get("network_mode")):
        problems.append(f"the host network (network_mode={config['network_mode']})")
    if _namespace_is_shared(config.get("pid_mode")):
        problems.append(f"the host PID namespace (pid_mode={config['pid_mode']})")
    for key in ("ipc_mode", "userns_mode", "uts_mode"):
        if _namespace_is_shared(config.get(key)):
            problems.append(f"a host namespace ({key}={config[key]})")
    sockets = _docker_socket_paths()
    for source in _mount_sources(config):
        if _exposes_docker_socket(source, sockets):
            problems.append(f"the docker socket mounted (from {source})")
    if config.get("devices"):
        problems.append("host devices")
    if str(config.get("user", SANDBOX_USER)).split(":")[0] in ("", "0", "root"):
        problems.append("running as root")
    if "no-new-privileges" not in " ".join(config.get("security_opt") or []):
        problems.append("a container without no-new-privileges")
    if "ALL" not in [str(c).upper() for c in config.get("cap_drop") or []]:
        problems.append("a container that keeps capabilities (cap_drop must be ALL)")
    if problems:
        raise SandboxConfigRefused("sandbox container refused: " + "; ".join(problems))
