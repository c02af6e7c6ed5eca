"""Long-lived programs that speak on their stdio (MCP servers), confined as local runs are.

``server_command(spec)`` gives the argv and environment that start a program
under the supervisor (``supervisor.py``), which the caller spawns with the
pipes it wants: the program's stdin, stdout and stderr are the caller's.
It is confined like a local run, without a run's time and CPU limits:

- ``unshare``: own user, PID, mount, network, IPC, UTS and cgroup
  namespaces. The root holds the system directories and a snapshot of /etc
  (read-only), what ``spec.read`` names (read-only) and ``spec.write`` names
  (writable), a private /tmp, and a scratch dir of its own at /work (a tmpfs,
  lost when the program ends). No network but its own loopback. Landlock
  inside keeps writes to /work, /tmp and the ``write`` paths.
- ``landlock`` (no user namespaces here): the host's file system, of which
  Landlock lets it read only the same places and write only its scratch dir
  (a host dir) and the ``write`` paths; no TCP, and seccomp refuses new sockets.

A server whose ``network`` lists hosts (``api.github.com:443``) reaches
those and nothing else, through a proxy of its own in the caller's process
(``egress.py``): its environment's ``HTTPS_PROXY`` and friends name it at
``127.0.0.1:3128`` in the server's own network. Only with ``unshare``: with
Landlock alone the server shares the host's network, where it would reach
every host or none, so such a server is not started.

Nothing else: not the caller's environment (``spec.env`` and a minimal
PATH, HOME, LANG, TMPDIR only), not its data or keys (a ``read``/``write``
path that holds one of ``spec.hidden`` is refused). Where neither method
works (only rlimits), the program is refused: it would read what its user
reads and reach every port of the host. When the caller is root, the program
runs as a uid of its own, like a run: one per server name (``server_uid``), so
that what it wrote in its ``write`` paths stays its own after a restart and in
every web process.

The host dir a server's root (or scratch) is built on is named with the
caller's pid, so a dead caller's are removed like a dead worker's work dirs;
``ConfinedServer.cleanup`` removes it when the server is done with.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile

from ..base import ConfinedServer, Limits, SandboxUnavailable, ServerSpec
from ..egress import EGRESS_PORT, EGRESS_SOCKET, Egress, EgressError, parse_all, proxy_variables
from . import probes
from .confinement import (
    SANDBOX_WORKDIR,
    SUPERVISOR,
    _landlock_rules,
    _namespace_layout,
    _supervisor_config,
)
from .host import (
    BASE_DIR_PREFIX,
    RUN_UID_BASE,
    RUN_UID_SPAN,
    SYSTEM_PATH,
    _is_root,
    _remove_stale_base_dirs,
)
from .programs import Program
from .rlimits import MAX_OPEN_FILES, MB, _relative_nproc

SCRATCH = SANDBOX_WORKDIR  # the scratch dir as the program sees it (own namespaces): a tmpfs


def overlaps(path: str, other: str) -> bool:
    """Whether one of two absolute paths is, or holds, the other."""
    path, other = os.path.realpath(path), os.path.realpath(other)
    return path == other or other.startswith(path.rstrip("/") + "/") or path.startswith(other + "/")


def resolve(argv0: str) -> str:
    """The program's absolute path (relative names from the caller's working dir or PATH)."""
    if "/" in argv0:
        found = os.path.abspath(argv0)
        if not os.path.isfile(found):
            raise FileNotFoundError(argv0)
        return found
    found = shutil.which(argv0) or shutil.which(argv0, path=SYSTEM_PATH)
    if found is None:
        raise FileNotFoundError(argv0)
    return os.path.abspath(found)


def installation(executable: str) -> list[str]:
    """Where a program outside the system dirs is installed: what it needs to start.

    A venv's python is a link into its base interpreter's prefix: both count.
    """
    found = []
    for path in (executable, os.path.realpath(executable)):
        if path.startswith(("/usr/", "/bin/", "/sbin/", "/lib")):
            continue
        prefix = os.path.dirname(os.path.dirname(path))
        if prefix not in found and prefix != "/":
            found.append(prefix)
    return found


def server_uid(name: str) -> int:
    """The uid a server runs as under root: one per server name, in every process and after
    every restart (what it wrote stays its own), from the range of run uids."""
    digest = int.from_bytes(hashlib.sha256(f"airlock-server:{name}".encode()).digest()[:8], "big")
    return RUN_UID_BASE + digest % RUN_UID_SPAN


def _closed_to_others(path: str) -> str | None:
    """The first folder on the way to ``path`` (or ``path``) another user cannot enter or read."""
    parts = os.path.abspath(path).split("/")[1:]
    for depth in range(1, len(parts) + 1):
        here = "/" + "/".join(parts[:depth])
        try:
            mode = os.stat(here).st_mode
        except OSError:
            return here
        last = depth == len(parts)
        needed = (0o004 | (0o001 if os.path.isdir(here) else 0)) if last else 0o001
        if mode & needed != needed:
            return here
    return None


def method_here() -> str:
    problems = probes.method_problems()
    for method in ("unshare", "landlock"):
        if problems[method] is None:
            return method
    raise SandboxUnavailable(
        "no way to confine a server on this host: it needs unprivileged user namespaces "
        f"({problems['unshare']}) or Landlock ({problems['landlock']})"
    )


def server_command(spec: ServerSpec, method: str | None = None) -> ConfinedServer:
    """How to start ``spec`` confined here; ``SandboxUnavailable`` when it cannot be."""
    method = method or method_here()
    try:
        entries = parse_all(spec.network)
    except EgressError as exc:
        raise SandboxUnavailable(f"network: {exc}") from None
    if entries and method != "unshare":
        raise SandboxUnavailable(
            "a server with a network list needs a network of its own (user namespaces), "
            f"which this host refuses ({method} confines it in the host's network, where it "
            "would reach every host or none)"
        )
    executable = resolve(spec.argv[0])
    read = [*installation(executable), *spec.read]
    for path in [*read, *spec.write]:
        if not os.path.isabs(path):
            raise SandboxUnavailable(f"{path!r}: a server's paths must be absolute")
        for secret in spec.hidden:
            if overlaps(path, secret):
                raise SandboxUnavailable(f"{path} would show the server {secret}, Airlock's own")
    uid = server_uid(spec.name) if _is_root() else None
    if uid is not None and method == "landlock":  # with namespaces, root clones them for it
        for path in [*read, *spec.write]:
            if blocked := _closed_to_others(path):
                raise SandboxUnavailable(
                    f"{blocked} is closed to other users, and a server started by root runs "
                    f"as a uid of its own: install it where every user may read it (or open "
                    f"{blocked} to them)"
                )
    _remove_stale_base_dirs()
    host_dir = tempfile.mkdtemp(prefix=f"{BASE_DIR_PREFIX}{os.getpid()}-server-")
    os.chmod(host_dir, 0o700)
    if uid is not None:
        os.chown(host_dir, uid, uid)
    argv = [executable, *spec.argv[1:]]
    program = Program("server", (executable,), "")
    rlimits = _rlimits(spec.limits, extra_processes=3 if method == "unshare" else 0)
    if method != "unshare" and uid is None:  # RLIMIT_NPROC would count all our user's
        rlimits = _relative_nproc(rlimits, spec.limits)
    egress, proxied = None, {}
    if method == "unshare":
        layout = _namespace_layout(host_dir, None, spec.limits, [])
        layout["server_binds"] = [(path, path) for path in read]
        layout["writable"] = [(path, path) for path in spec.write]
        config = _supervisor_config(argv, uid, rlimits, "unshare", SCRATCH, layout=layout)
        config["landlock"]["write"] += list(spec.write)
        if entries:
            egress = Egress(
                spec.name, entries, uid, prefix=f"{BASE_DIR_PREFIX}{os.getpid()}-egress-"
            )
            layout["egress"] = {
                "socket": egress.socket_path,
                "target": EGRESS_SOCKET,
                "port": EGRESS_PORT,
            }
            config["landlock"]["connect_tcp"] = [EGRESS_PORT]
            proxied = proxy_variables()
        home = tmp = SCRATCH
    elif method == "landlock":
        rules = _landlock_rules(host_dir, program)
        rules["read"] += read
        rules["write"] += list(spec.write)
        config = _supervisor_config(argv, uid, rlimits, "landlock", host_dir, rules)
        home = tmp = host_dir
    else:
        raise SandboxUnavailable(f"a server cannot be confined with {method!r}")
    config["kill_uid"] = False
    path = ":".join(dict.fromkeys([os.path.dirname(executable), *SYSTEM_PATH.split(":")]))
    base = {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": tmp, **proxied}
    config["env"] = {**base, **dict(spec.env)}
    details = {"confinement": method, "uid": uid, "read": read, "write": list(spec.write)}
    details["network"] = [str(entry) for entry in entries]
    return ConfinedServer(
        # Its configuration holds the server's env (tokens): not on a command line, which
        # every user of the host may read, but in the supervisor's environment.
        argv=[sys.executable, "-I", "-S", SUPERVISOR],
        env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", "AIRLOCK_SUPERVISOR": json.dumps(config)},
        method=method,
        details=details,
        cleanups=[lambda: shutil.rmtree(host_dir, ignore_errors=True)]
        + ([egress.close] if egress else []),
    )


def _rlimits(limits: Limits, extra_processes: int) -> list[tuple[int, int, int]]:
    """A run's rlimits but CPU time (a server lives on); RLIMIT_DATA, which V8 tolerates."""
    memory, file_size = limits.memory_mb * MB, limits.max_file_size_mb * MB
    processes = limits.max_processes + extra_processes
    return [
        (resource.RLIMIT_FSIZE, file_size, file_size),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NOFILE, MAX_OPEN_FILES, MAX_OPEN_FILES),
        (resource.RLIMIT_NPROC, processes, processes),
        (resource.RLIMIT_DATA, memory, memory),
    ]
