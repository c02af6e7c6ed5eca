"""What a local run takes from the host (cached per process where it is costly).

The system paths and the read-only mounts of the system directories, the
per-run uids, the snapshot of /etc the sandbox sees, the base dirs that
hold the work dirs (named with the worker's pid, so a dead worker's are found),
the kernel's Landlock ABI, and util-linux's setpriv and prlimit to launch a run.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading

from ..base import remove_stale_folders
from . import supervisor as supervisor_program
from .rlimits import PRLIMIT_OPTIONS

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# Per-run uids come from a range no real account uses; random so that
# parallel workers (and xdist processes) never pick the same one.
RUN_UID_BASE = 1_600_000_000
RUN_UID_SPAN = 400_000_000
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
BASE_DIR_PREFIX = "airlock-sandbox-"  # + the worker's pid: stale ones are found by it
# What of /etc the sandbox sees: what programs need, nothing of the
# deployment's own files (environment files, service configs, keys).
ETC_ENTRIES = (
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "resolv.conf",
    "gai.conf",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "mime.types",
    "os-release",
    "debian_version",
    "python3",
    "python3.11",
    "inputrc",
)


def _is_root() -> bool:
    return os.geteuid() == 0


def _new_run_uid() -> int:
    return RUN_UID_BASE + secrets.randbelow(RUN_UID_SPAN)


def _drop_privileges_kwargs(uid: int) -> dict:
    return {"user": uid, "group": uid, "extra_groups": []}


def system_layout(etc: bool = True) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What of the host a run's own root shows: (read-only binds, symlinks).

    The system directories (``/bin`` -> ``usr/bin`` links mirrored as links)
    and, with ``etc``, the snapshot of /etc.
    """
    binds = [("/usr", "/usr")]
    if etc:
        binds.append((_etc_snapshot(), "/etc"))
    links = []
    for name in SYSTEM_DIRS:
        path = f"/{name}"
        if os.path.islink(path):
            links.append((os.readlink(path), path))
        elif os.path.isdir(path):
            binds.append((path, path))
    return binds, links


def _system_mounts(etc: bool = True) -> list[str]:
    """``system_layout`` as bubblewrap arguments."""
    binds, links = system_layout(etc)
    args: list[str] = []
    for target, link in links:
        args += ["--symlink", target, link]
    for source, target in binds:
        args += ["--ro-bind", source, target]
    return args


_snapshot_lock = threading.Lock()


def _etc_snapshot() -> str:
    """A copy of the ``ETC_ENTRIES`` of /etc, made once per process.

    One bind of a small copy instead of a bind per entry: each bind costs
    bubblewrap a few hundred microseconds on every run. Made under a lock:
    runs and probes that start together share one copy.
    """
    with _snapshot_lock:
        return _make_etc_snapshot()


@functools.cache
def _make_etc_snapshot() -> str:
    _remove_stale_base_dirs()
    snapshot = tempfile.mkdtemp(prefix=f"{BASE_DIR_PREFIX}{os.getpid()}-etc-")
    for name in ETC_ENTRIES:
        source, target = os.path.join("/etc", name), os.path.join(snapshot, name)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        with contextlib.suppress(OSError, shutil.Error):
            if os.path.isdir(source) and not os.path.islink(source):
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target, follow_symlinks=False)
    # Copies keep their modes, but directories made here follow the worker's
    # umask (serve's is 077): the run uid must reach every one of them.
    for folder, _, _ in os.walk(snapshot):
        os.chmod(folder, 0o755)
    atexit.register(_remove_if_mine, snapshot, os.getpid())
    return snapshot


def _remove_if_mine(path: str, owner: int) -> None:
    """atexit handlers are inherited by forked workers: only the creator removes."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


@functools.cache
def _remove_stale_base_dirs() -> None:
    """Work dirs left by a worker that died (once per process): its pid is in the name."""
    remove_stale_folders(tempfile.gettempdir(), BASE_DIR_PREFIX)


@functools.cache
def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or disabled at boot)."""
    return supervisor_program.landlock_abi()


@functools.cache
def _launch_tools() -> tuple[str | None, str | None]:
    return shutil.which("setpriv", path=SYSTEM_PATH), shutil.which("prlimit", path=SYSTEM_PATH)


# Python ignores SIGPIPE and SIGXFSZ itself and subprocess restores them in every child.
_CHECKED = tuple(
    signum
    for signum in supervisor_program.CATCHABLE
    if signum not in (signal.SIGPIPE, getattr(signal, "SIGXFSZ", signal.SIGPIPE))
)


def default_signals_prefix() -> list[str]:
    """An argv prefix that starts the command with every signal at its default, when this
    process ignores some: a worker started by nohup or ``cmd &`` from a script has SIGINT
    and SIGHUP ignored, and an ignored signal survives exec (a session's timeout could no
    longer interrupt a snippet). Empty in the usual case: no extra exec on the hot path.
    (The supervisor resets them itself: ``supervisor.default_signals``.)"""
    if not any(signal.getsignal(signum) == signal.SIG_IGN for signum in _CHECKED):
        return []
    env = _env_resetting_signals()
    return [env, "--default-signal"] if env else []


@functools.cache
def _env_resetting_signals() -> str | None:
    """coreutils' env if it can reset signals (``--default-signal``, 8.31 and later)."""
    env = shutil.which("env", path=SYSTEM_PATH)
    if env is None:
        return None
    try:
        done = subprocess.run(
            [env, "--default-signal", "true"], capture_output=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return env if done.returncode == 0 else None


def launch_prefix(uid: int | None, rlimits: list[tuple[int, int, int]]) -> list[str] | None:
    """util-linux's setpriv and prlimit as an argv prefix: drop to ``uid``, set the rlimits.

    Doing it in Python (``user=``, ``preexec_fn``) forces a full fork() of the
    worker, which costs milliseconds for a big process; without them
    subprocess uses vfork. None when the tools are missing.
    """
    setpriv, prlimit = _launch_tools()
    if prlimit is None or (uid is not None and setpriv is None):
        return None
    prefix = []
    if uid is not None:
        prefix += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    prefix += [prlimit, *(f"{PRLIMIT_OPTIONS[res]}={soft}:{hard}" for res, soft, hard in rlimits)]
    return [*prefix, "--"]
