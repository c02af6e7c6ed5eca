"""How a local run is confined: the supervisor's orders, the namespace root, bubblewrap's arguments.

``supervisor_config`` is what ``supervisor.py`` gets for a run without
bubblewrap (its own namespaces with ``unshare``, or Landlock alone);
``bwrap_args`` is the same confinement said to bubblewrap.
"""

from __future__ import annotations

import os

from ..base import Limits
from . import supervisor as supervisor_program
from .host import ETC_ENTRIES, SYSTEM_DIRS, _landlock_abi, _system_mounts, system_layout
from .programs import Program, _extra_binds
from .rlimits import MB
from .seccomp import seccomp_program

SANDBOX_WORKDIR = "/work"  # the work dir as the code sees it inside its namespaces
SANDBOX_UID = 65534  # "nobody" inside the user namespace
SUPERVISOR = supervisor_program.__file__
DEVICES = tuple(f"/dev/{name}" for name in supervisor_program.DEVICES)


def _supervisor_config(
    argv: list[str],
    uid: int | None,
    rlimits: list[tuple[int, int, int]],
    method: str,
    cwd: str = SANDBOX_WORKDIR,
    landlock: dict | None = None,
    *,
    layout: dict | None = None,
) -> dict:
    """What ``supervisor.py`` gets: the code's argv and how to confine it.

    ``layout``: the root of a run in its own namespaces (``unshare``);
    ``landlock``: what a run confined by Landlock alone may touch. The caller
    adds ``status_fd``, where the supervisor reports the code's exit status.
    """
    config = {
        "argv": argv,
        "cwd": cwd,
        "uid": uid,
        "rlimits": rlimits,
        "parent": os.getpid(),
        "confine": {"unshare": "namespaces", "landlock": "landlock"}.get(method, "none"),
        "seccomp": (seccomp_program(deny_sockets=method == "landlock") or b"").hex(),
        "landlock_abi": _landlock_abi(),
    }
    if method == "unshare":
        config["layout"] = layout
        # Inside the namespaces Landlock is a second wall: writes only where the
        # tmpfs are, TCP off, signals and abstract sockets kept to the run.
        config["landlock"] = {
            "read": ["/"],
            "write": [SANDBOX_WORKDIR, "/tmp", "/dev/shm"],
            "devices": list(DEVICES),
        }
    elif method == "landlock":
        config["landlock"] = landlock
    return config


def _namespace_layout(
    workdir: str, code_file: str | None, limits: Limits, extra: list[tuple[str, str]]
) -> dict:
    """The root a run gets in its own namespaces, built on ``workdir`` (see supervisor.py)."""
    binds, links = system_layout()
    size = limits.disk_mb * MB
    return {
        "root": workdir,
        "binds": binds + extra,
        "symlinks": links,
        "tmpfs": [
            ("/tmp", size, "1777"),
            ("/dev/shm", size, "1777"),
            (SANDBOX_WORKDIR, size, "0755"),
        ],
        "code_file": code_file,
        "script": None if code_file is None else f"{SANDBOX_WORKDIR}/{os.path.basename(code_file)}",
        "hostname": "sandbox",
    }


def _landlock_rules(workdir: str, program: Program) -> dict:
    """What a run confined by Landlock alone may touch on the host's own file system."""
    system = [f"/{name}" for name in SYSTEM_DIRS] + ["/usr"]
    system += [source for source, _ in _extra_binds(program)]
    etc = [os.path.join("/etc", name) for name in ETC_ENTRIES]
    # /proc/self resolves to the code's own /proc entry (the pid survives exec);
    # nothing else of /proc, so no other process can be listed or read.
    return {"read": system + etc + ["/proc/self"], "write": [workdir], "devices": list(DEVICES)}


def bwrap_args(
    program: Program, limits: Limits, code_fd: int, script: str, flags: frozenset[str]
) -> list[str]:
    """bubblewrap's arguments for a run: its namespaces, its root, the code as ``script``."""
    args = ["--unshare-all", "--die-with-parent", "--new-session"]
    if "--disable-userns" in flags:
        args += ["--unshare-user", "--disable-userns"]
    args += _system_mounts()
    for source, target in _extra_binds(program):
        args += ["--ro-bind", source, target]
    args += ["--proc", "/proc", "--dev", "/dev"]
    size = [] if "--size" not in flags else ["--size", str(limits.disk_mb * MB)]
    for mountpoint in ("/tmp", "/dev/shm", SANDBOX_WORKDIR):
        args += [*size, "--tmpfs", mountpoint]
    args += ["--perms", "0644", "--file", str(code_fd), script]
    # The root bwrap builds is a tmpfs of its own; make it read-only like the binds.
    args += ["--remount-ro", "/", "--chdir", SANDBOX_WORKDIR, "--hostname", "sandbox"]
    args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    return args


def _memfd_with(data: bytes) -> int:
    """An anonymous file holding ``data``, for bwrap to read (code, seccomp filter)."""
    fd = os.memfd_create("airlock-sandbox", 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
