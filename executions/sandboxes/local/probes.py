"""Which confinement methods work on this host, and why the stronger ones do not (probed once).

Each method is tried exactly as a run uses it (as a run uid when the worker
is root): user namespaces may be allowed for root and refused for others.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile

from ..base import Limits
from . import supervisor as supervisor_program
from .confinement import SUPERVISOR, _namespace_layout, _supervisor_config
from .host import (
    BASE_DIR_PREFIX,
    SYSTEM_PATH,
    _drop_privileges_kwargs,
    _is_root,
    _landlock_abi,
    _new_run_uid,
    _system_mounts,
)
from .seccomp import seccomp_program

# Confinement methods, strongest first, and the isolation each one gives.
METHODS = {
    "bwrap": "namespaces",
    "unshare": "namespaces",
    "landlock": "landlock",
    "rlimits": "weak",
}
# Landlock alone must also scope signals and abstract sockets to the run (ABI 6).
LANDLOCK_ONLY_ABI = 6


@functools.cache
def _bwrap_features() -> tuple[str | None, str, frozenset[str]]:
    """(path of a working bwrap or None, reason, supported optional flags)."""
    path = shutil.which("bwrap") or shutil.which("bwrap", path=SYSTEM_PATH)
    if not path:
        return None, "bubblewrap (bwrap) is not installed", frozenset()
    try:
        help_text = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bwrap does not start: {exc}", frozenset()
    flags = frozenset(f for f in ("--size", "--disable-userns") if f in help_text)
    # Try it exactly as a run uses it (as an unprivileged uid when we are root):
    # user namespaces may be allowed for root and refused for others.
    argv = [path, "--unshare-all", "--die-with-parent", *_system_mounts(etc=False)]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "true"]
    kwargs = _drop_privileges_kwargs(_new_run_uid()) if _is_root() else {}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, **kwargs)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bwrap does not start: {exc}", flags
    if done.returncode != 0:
        message = done.stderr.strip().removeprefix("bwrap: ").split(" See <")[0]
        return None, f"bwrap cannot create namespaces here: {message}", flags
    return path, "bubblewrap namespaces", flags


@functools.cache
def _unshare_problem() -> str | None:
    """Why the supervisor cannot give a run its own namespaces here, or None when it can.

    Tried exactly as a run uses it (as a run uid when we are root): user
    namespaces may be allowed for root and refused for others.
    """
    if os.uname().machine not in supervisor_program.SYS_PIVOT_ROOT_BY_MACHINE:
        return f"no pivot_root number for {os.uname().machine}"
    base = tempfile.mkdtemp(prefix=f"{BASE_DIR_PREFIX}{os.getpid()}-probe-")
    try:
        uid = _new_run_uid() if _is_root() else None
        workdir = os.path.join(base, "run")
        os.mkdir(workdir, 0o700)
        if uid is not None:
            os.chmod(base, 0o711)
            os.chown(workdir, uid, uid)
        config = _supervisor_config(
            ["/bin/true"], uid, [], "unshare", layout=_namespace_layout(workdir, None, Limits(), [])
        )
        status_r, status_w = os.pipe()
        config["status_fd"] = status_w
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", SUPERVISOR, json.dumps(config)],
                capture_output=True,
                text=True,
                timeout=10,
                cwd=workdir,
                env={"PATH": SYSTEM_PATH},
                pass_fds=(status_w,),
            )
        finally:
            os.close(status_w)
            with os.fdopen(status_r) as status:
                reported = status.read()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the namespace probe did not run: {exc}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if reported != "0":
        reason = done.stderr.strip().rsplit("\n", 1)[-1].removeprefix("sandbox: ")
        reason = reason.removeprefix("cannot start the code: ")
        return reason or f"the namespace probe exited with {done.returncode}"
    return None


def _landlock_problem() -> str | None:
    """Why Landlock alone cannot confine a run here, or None when it can."""
    abi = _landlock_abi()
    if abi < LANDLOCK_ONLY_ABI:
        have = f"ABI {abi}" if abi else "no Landlock"
        return f"Landlock alone needs ABI {LANDLOCK_ONLY_ABI} (Linux 6.12+), this kernel has {have}"
    if seccomp_program(deny_sockets=True) is None:
        return "Landlock alone needs the seccomp socket filter (x86_64 only)"
    return None


def method_problems() -> dict[str, str | None]:
    """Each confinement method: None when it works here, else why not (probed once per process)."""
    return {
        "bwrap": None if _bwrap_features()[0] else _bwrap_features()[1],
        "unshare": _unshare_problem(),
        "landlock": _landlock_problem(),
        "rlimits": None,
    }


def describe_method(method: str) -> str:
    """How a method confines a run, as /healthz and the console say it."""
    abi = _landlock_abi()
    return {
        "bwrap": "bubblewrap namespaces",
        "unshare": "own namespaces (unprivileged user namespaces)"
        + (f" + Landlock ABI {abi}" if abi else ""),
        "landlock": f"Landlock ABI {abi} alone (no user namespaces)",
        "rlimits": "a subprocess with rlimits only: no namespaces, no Landlock",
    }[method]
