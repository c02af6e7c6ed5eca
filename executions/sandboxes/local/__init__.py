"""The local backend: a subprocess under rlimits, confined as strongly as the host allows.

Layers, from always-on to best-effort:

- Always: rlimits (CPU, memory, processes, file size, no core), its own
  session, stdin on /dev/null, a scrubbed environment (minimal PATH, HOME,
  LANG, TMPDIR and nothing of the worker's), a private work dir.
- When the worker is root: every run gets a uid of its own (random, from a
  range no account uses). The code cannot read root's files (/etc/shadow),
  another run's files, or signal or trace another run; ``kill(-1)`` as that
  uid ends everything it started.
- A seccomp filter (x86_64) refuses ptrace, process_vm_*, bpf, perf, keyrings,
  mounts and new namespaces; no_new_privs disarms setuid binaries.

Then the first confinement method that works here (``METHODS``, strongest first):

- ``bwrap`` — bubblewrap: new user, PID, network, IPC, UTS and cgroup
  namespaces; only the system directories (read-only), a snapshot of /etc, a
  minimal /dev, a private /proc, and size-limited tmpfs for the work dir, /tmp
  and /dev/shm. bubblewrap's PID 1 dies with it and the kernel then kills the
  whole namespace, so a setsid + double fork cannot outlive the run.
- ``unshare`` — the same namespaces and the same root, made by the supervisor
  itself (``supervisor.py``) with the kernel calls bubblewrap uses, plus
  Landlock where the kernel has it: what every Linux with unprivileged user
  namespaces gets with nothing installed.
- ``landlock`` — where user namespaces are refused (some AppArmor policies):
  Landlock (ABI 6, Linux 6.12+) confines files, TCP, abstract sockets and
  signals to the run, and seccomp refuses new sockets.
- ``rlimits`` — none of those: the weak fallback. The console shows it in
  red and policy never approves a script into it on its own.

Without bubblewrap a small supervisor (a child subreaper) runs the code;
orphans re-parent to it, and it kills and reaps every descendant when the
code ends or the run is stopped.

Python runs as ``python3 -I -S``: the standard library only, like the sandbox
image (no host site-packages, no .pth hooks), and faster to start. To take
sandbox and interpreter start-up off a run's latency, each (language,
limits) gets Pythons started ahead of time that wait for their code on stdin;
each is used for one run only and replaced in the background.

The package: ``host`` (system paths, run uids, the /etc snapshot, base
dirs), ``programs`` (interpreters and the pre-start loader), ``rlimits``,
``seccomp``, ``supervisor`` (the program that confines and supervises a run
without bubblewrap) and ``process`` (one sandboxed process tree and its
output). ``LocalSandbox`` and the host probes tests replace (``_which``,
``_bwrap_features``, ``_unshare_problem``, ``_landlock_abi``,
``_launch_tools``) live here.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar

from ..base import (
    LANGUAGES,
    Availability,
    Limits,
    OutputSink,
    RunOutcome,
    RunRequest,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    UnsupportedLanguage,
)
from . import supervisor as supervisor_program
from .host import (
    BASE_DIR_PREFIX,
    ETC_ENTRIES,
    SYSTEM_DIRS,
    SYSTEM_PATH,
    _drop_privileges_kwargs,
    _extra_binds,
    _is_root,
    _new_run_uid,
    _remove_stale_base_dirs,
    _system_mounts,
    system_layout,
)
from .host import RUN_UID_BASE as RUN_UID_BASE
from .host import _etc_snapshot as _etc_snapshot
from .host import _remove_if_mine as _remove_if_mine
from .process import KILL_GRACE_SECONDS as KILL_GRACE_SECONDS
from .process import SandboxProcess, drain_output, pump_output
from .programs import SCRIPT_NAMES, Program
from .programs import WARM_LOADER as WARM_LOADER
from .rlimits import MB, _apply_rlimits, _relative_nproc, rlimits_for
from .rlimits import PRLIMIT_OPTIONS as PRLIMIT_OPTIONS
from .seccomp import BLOCKED_SYSCALLS as BLOCKED_SYSCALLS
from .seccomp import seccomp_program

if TYPE_CHECKING:
    from ..sessions import Session


SANDBOX_WORKDIR = "/work"  # the work dir as the code sees it inside its namespaces
SANDBOX_UID = 65534  # "nobody" inside the user namespace
WARM_KEYS_KEPT = 4  # distinct (language, limits) combinations with pre-started interpreters
WARM_PER_KEY = 2  # pre-started interpreters kept for each of them
SUPERVISOR = supervisor_program.__file__
# Confinement methods, strongest first, and the isolation each one gives.
METHODS = {
    "bwrap": "namespaces",
    "unshare": "namespaces",
    "landlock": "landlock",
    "rlimits": "weak",
}
# Landlock alone must also scope signals and abstract sockets to the run (ABI 6).
LANDLOCK_ONLY_ABI = 6
DEVICES = tuple(f"/dev/{name}" for name in supervisor_program.DEVICES)
NO_NETWORK = (
    "the local backend gives scripts no network: a run would share the host's, where "
    "the console, Redis and PostgreSQL listen; use the docker or gvisor backend"
)


def _which(name: str) -> str | None:
    return shutil.which(name, path=SYSTEM_PATH) or shutil.which(name)


def resolve_program(language: str) -> Program:
    """The interpreter for a language on this host, or ``UnsupportedLanguage``."""
    if language not in LANGUAGES:
        raise UnsupportedLanguage(f"unknown language {language!r}; use one of {LANGUAGES}")
    filename = SCRIPT_NAMES[language]
    if language == "python":
        # The system interpreter first: an unprivileged run uid can read /usr,
        # not a virtualenv under /root. -I: no user site, no PYTHON* variables.
        python = shutil.which("python3", path=SYSTEM_PATH) or sys.executable
        return Program(language, (python, "-I", "-S", "-u"), filename)
    if language == "bash":
        bash = _which("bash")
        if not bash:
            raise UnsupportedLanguage("bash is not installed on this worker")
        return Program(language, (bash, "--noprofile", "--norc"), filename)
    node = _which("node")
    if not node:
        raise UnsupportedLanguage(
            "javascript needs Node.js, but `node` is not on this worker's PATH; "
            "install nodejs or use the docker backend"
        )
    return Program(language, (node,), filename)


# --- host facts (cached per process) ---------------------------------------


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
def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or disabled at boot)."""
    return supervisor_program.landlock_abi()


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


@functools.cache
def _launch_tools() -> tuple[str | None, str | None]:
    return shutil.which("setpriv", path=SYSTEM_PATH), shutil.which("prlimit", path=SYSTEM_PATH)


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


# --- the backend -------------------------------------------------------------


class LocalSandbox(Sandbox):
    """Runs code as a local subprocess; see the module docstring for the layers."""

    name: ClassVar[str] = "local"

    def __init__(self, method: str | None = None, base_dir: str | None = None):
        """``method``: one of ``METHODS``, or None for the strongest that works here."""
        problems = method_problems()
        if method is None:
            method = next(name for name, problem in problems.items() if problem is None)
        elif method not in METHODS:
            raise SandboxUnavailable(f"unknown local method {method!r}; use one of {list(METHODS)}")
        elif problems[method]:
            raise SandboxUnavailable(f"local method {method!r} is unusable: {problems[method]}")
        self.method = method
        self.isolation = METHODS[method]
        self.bwrap, _, self.bwrap_flags = _bwrap_features()
        if method != "bwrap":
            self.bwrap = None
        self._base_dir = base_dir
        self._base_pid = os.getpid()  # a forked worker makes (and removes) its own
        self._owns_base_dir = base_dir is None  # only a dir we made is removed at close
        self._base_lock = threading.Lock()
        self._warm_lock = threading.Lock()
        self._warm: dict[tuple[str, Limits], list[SandboxProcess]] = {}
        self._warming: dict[tuple[str, Limits], int] = {}  # pre-starts under way
        self._warm_owner = os.getpid()
        self._closed = False
        _open_instances.add(self)

    def close(self) -> None:
        with self._warm_lock:
            self._closed = True
            mine = self._warm_owner == os.getpid()
            idle = [process for kept in self._warm.values() for process in kept] if mine else []
            self._warm = {}
        for process in idle:
            process.stop()
            process.cleanup()
        with self._base_lock:
            if self._owns_base_dir and self._base_dir and self._base_pid == os.getpid():
                shutil.rmtree(self._base_dir, ignore_errors=True)
                self._base_dir = None

    @classmethod
    def probe(cls) -> Availability:
        problems = method_problems()
        method = next(name for name, problem in problems.items() if problem is None)
        reason = describe_method(method)
        stronger = list(METHODS)[: list(METHODS).index(method)]  # and why each did not work
        if stronger:
            reason += " (" + "; ".join(f"{name}: {problems[name]}" for name in stronger) + ")"
        return Availability(True, reason, METHODS[method])

    # -- running ------------------------------------------------------------

    def run(
        self, request: RunRequest, sink: OutputSink, cancel: threading.Event | None = None
    ) -> RunOutcome:
        started = time.monotonic()
        process = self._take_warm(request) or self.start(
            request.language, request.code, request.limits
        )
        try:
            ended = pump_output(process, sink, started + request.limits.timeout_seconds, cancel)
            if ended:
                process.stop()
                drain_output(process, sink)  # what was written before the kill
            else:
                process.finished()
            exit_code = process.exit_code()
        finally:
            process.stop()
            process.cleanup()
            sink.close()
            # Only now: started during the run, it would take the cores the run needs.
            self._prewarm_later(request.language, request.limits)
        return RunOutcome(
            exit_code=exit_code,
            duration_ms=int((time.monotonic() - started) * 1000),
            backend=self.name,
            timed_out=ended == "timeout",
            cancelled=ended == "cancel",
            details={**process.details, "limits": request.limits.as_dict()},
        )

    def open_session(self, language: str = "python", limits: Limits | None = None) -> Session:
        """A persistent session (see ``sessions.py``): state survives between executes."""
        from ..sessions import open_local_session

        return open_local_session(self, language, limits or Limits())

    def start(
        self,
        language: str,
        code: str,
        limits: Limits,
        interactive: bool = False,
        warm: bool = False,
    ) -> SandboxProcess:
        """Start ``code`` sandboxed; stdin is a pipe only for ``interactive`` (sessions).

        ``warm`` starts the interpreter with ``WARM_LOADER`` instead: it waits
        for its code on stdin (see ``_take_warm``).
        """
        program = resolve_program(language)
        if limits.network:
            raise SandboxError(NO_NETWORK)
        uid = _new_run_uid() if _is_root() else None
        interactive = interactive or warm
        try:
            if self.bwrap:
                process = self._start_bwrap(program, code, limits, uid, interactive, warm)
            else:
                process = self._start_supervised(program, code, limits, uid, interactive, warm)
        except OSError as exc:  # no space for the work dir, out of fds, ...
            raise SandboxError(f"cannot prepare the sandbox: {exc}") from exc
        process.details["warm"] = warm
        return process

    # -- pre-started interpreters ------------------------------------------------
    # Starting bubblewrap and Python is most of a run's latency. Each run takes
    # a Python started ahead of time for its limits (used once, never reused).
    # Its replacement starts once the run is over: starting it during the run
    # took the cores that the run itself needed (on two cores, a proposal →
    # result was 2 ms slower). WARM_PER_KEY of them are kept so that a run
    # that comes while another runs still finds one; the last one taken is
    # replaced at once.

    def _take_warm(self, request: RunRequest) -> SandboxProcess | None:
        key = (request.language, request.limits)
        with self._warm_lock:
            if self._warm_owner != os.getpid():  # forked worker: those belong to the parent
                self._warm, self._warming, self._warm_owner = {}, {}, os.getpid()
            kept = self._warm.get(key)
            process = kept.pop(0) if kept else None
            if kept == []:
                del self._warm[key]
        if process is None:
            return None
        if key not in self._warm:
            self._prewarm_later(*key)  # none left for the next run, which may come meanwhile
        try:
            if process.poll() is not None or process.stdin is None:
                raise BrokenPipeError
            process.stdin.write(request.code.encode("utf-8", errors="surrogatepass"))
            process.stdin.close()
        except (OSError, ValueError):
            process.stop()
            process.cleanup()
            return None
        return process

    def start_detached(self, language: str, code: str, limits: Limits, **kwargs) -> SandboxProcess:
        """``start`` for a process that outlives the calling thread (sessions)."""
        return _spawner().submit(self.start, language, code, limits, **kwargs).result()

    def _prewarm_later(self, language: str, limits: Limits) -> None:
        """Start interpreters for these limits in the background, up to WARM_PER_KEY."""
        if language != "python" or self._closed:
            return
        key = (language, limits)
        with self._warm_lock:
            missing = WARM_PER_KEY - len(self._warm.get(key, ())) - self._warming.get(key, 0)
            if missing <= 0:
                return
            self._warming[key] = self._warming.get(key, 0) + missing
        for _ in range(missing):
            _spawner().submit(self._prewarm, key)

    def _prewarm(self, key: tuple[str, Limits]) -> None:
        evicted: list[SandboxProcess] = []
        try:
            process = self.start(key[0], "", key[1], warm=True)
        except Exception:  # a failed pre-start only costs the next run its head start
            return
        finally:
            with self._warm_lock:
                self._warming[key] -= 1
                if not self._warming[key]:
                    del self._warming[key]
        with self._warm_lock:
            if self._closed:
                evicted.append(process)
            else:
                self._warm[key] = [*self._warm.pop(key, []), process]  # the newest key last
                while len(self._warm) > WARM_KEYS_KEPT:
                    evicted.extend(self._warm.pop(next(iter(self._warm))))
        for stale in evicted:
            stale.stop()
            stale.cleanup()

    def _environment(self, home: str, tmp: str) -> dict[str, str]:
        # Nothing of the worker's environment: no SECRET_KEY, DATABASE_URL, REDIS_URL.
        return {"PATH": SYSTEM_PATH, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": tmp}

    def _start_bwrap(
        self,
        program: Program,
        code: str,
        limits: Limits,
        uid: int | None,
        interactive: bool,
        warm: bool,
    ) -> SandboxProcess:
        code_fd = _memfd_with(code.encode("utf-8", errors="surrogatepass"))
        fds = [code_fd]
        script = f"{SANDBOX_WORKDIR}/{program.filename}"
        argv = [self.bwrap, *self._bwrap_args(program, limits, code_fd, script)]
        filter_bytes = seccomp_program()
        if filter_bytes:
            fds.append(_memfd_with(filter_bytes))
            argv += ["--seccomp", str(fds[-1])]
        info_r, info_w = os.pipe()
        os.set_blocking(info_r, False)
        fds.append(info_w)
        argv += ["--info-fd", str(info_w), "--", *program.command(script, warm)]
        # bwrap and its PID 1 run as the run uid too: two more processes.
        rlimits = rlimits_for(limits, program.language, extra_processes=2)
        if uid is None:
            rlimits = _relative_nproc(rlimits, limits)
        prefix = launch_prefix(uid, rlimits)
        try:
            popen = self._popen(
                argv if prefix is None else prefix + argv,
                env=self._environment(SANDBOX_WORKDIR, "/tmp"),
                cwd="/",
                uid=uid if prefix is None else None,
                pass_fds=tuple(fds),
                preexec=functools.partial(_apply_rlimits, rlimits) if prefix is None else None,
                interactive=interactive,
            )
        except BaseException:
            os.close(info_r)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        details = {"isolation": "namespaces", "interpreter": program.argv[0], "uid": uid}
        details["confinement"] = "bwrap"
        return SandboxProcess(
            popen, "namespaces", uid, None, info_fd=info_r, details=details, bwrap=True
        )

    def _bwrap_args(self, program: Program, limits: Limits, code_fd: int, script: str) -> list[str]:
        args = ["--unshare-all", "--die-with-parent", "--new-session"]
        if "--disable-userns" in self.bwrap_flags:
            args += ["--unshare-user", "--disable-userns"]
        args += _system_mounts()
        for source, target in _extra_binds(program):
            args += ["--ro-bind", source, target]
        args += ["--proc", "/proc", "--dev", "/dev"]
        size = [] if "--size" not in self.bwrap_flags else ["--size", str(limits.disk_mb * MB)]
        for mountpoint in ("/tmp", "/dev/shm", SANDBOX_WORKDIR):
            args += [*size, "--tmpfs", mountpoint]
        args += ["--perms", "0644", "--file", str(code_fd), script]
        # The root bwrap builds is a tmpfs of its own; make it read-only like the binds.
        args += ["--remount-ro", "/", "--chdir", SANDBOX_WORKDIR, "--hostname", "sandbox"]
        args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        return args

    def _start_supervised(
        self,
        program: Program,
        code: str,
        limits: Limits,
        uid: int | None,
        interactive: bool,
        warm: bool,
    ) -> SandboxProcess:
        workdir = self._make_workdir(uid)
        script = os.path.join(workdir, program.filename)
        if not warm:  # a pre-started interpreter writes the script itself, as the run uid
            with open(script, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(code)
            if uid is not None:
                os.chown(script, uid, uid)
        if self.method == "unshare":
            # M, the namespace's init and the code count in the new user namespace.
            rlimits = rlimits_for(limits, program.language, extra_processes=3)
            inside = f"{SANDBOX_WORKDIR}/{program.filename}"
            layout = _namespace_layout(
                workdir, None if warm else script, limits, _extra_binds(program)
            )
            config = _supervisor_config(
                program.command(inside, warm), uid, rlimits, "unshare", layout=layout
            )
            env = (SANDBOX_WORKDIR, "/tmp")
        else:
            rlimits = rlimits_for(limits, program.language)
            if uid is None:
                rlimits = _relative_nproc(rlimits, limits)
            rules = _landlock_rules(workdir, program) if self.method == "landlock" else None
            config = _supervisor_config(
                program.command(script, warm), uid, rlimits, self.method, workdir, rules
            )
            env = (workdir, workdir)
        status_r, status_w = os.pipe()
        config["status_fd"] = status_w
        os.set_blocking(status_r, False)  # read once the supervisor is gone; never wait on it
        try:
            popen = self._popen(
                [sys.executable, "-I", "-S", SUPERVISOR, json.dumps(config)],
                env=self._environment(*env),
                cwd=workdir,
                uid=None,
                pass_fds=(status_w,),
                preexec=None,
                interactive=interactive,
            )
        except BaseException:
            os.close(status_r)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            os.close(status_w)
        details = {"isolation": self.isolation, "interpreter": program.argv[0], "uid": uid}
        details["confinement"] = self.method
        return SandboxProcess(
            popen, self.isolation, uid, workdir, status_fd=status_r, details=details
        )

    def _popen(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        uid: int | None,
        pass_fds: tuple[int, ...],
        preexec,
        interactive: bool,
    ) -> subprocess.Popen:
        kwargs = _drop_privileges_kwargs(uid) if uid is not None else {}
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                pass_fds=pass_fds,
                start_new_session=True,
                preexec_fn=preexec,
                **kwargs,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox: {exc}") from exc

    def _make_workdir(self, uid: int | None) -> str:
        base = self._ensure_base_dir()
        workdir = tempfile.mkdtemp(prefix="run-", dir=base)
        if uid is not None:
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        return workdir

    def _ensure_base_dir(self) -> str:
        with self._base_lock:
            if self._owns_base_dir and self._base_pid != os.getpid():
                self._base_dir, self._base_pid = None, os.getpid()  # forked: not ours
            if self._base_dir is None:
                _remove_stale_base_dirs()
                prefix = f"{BASE_DIR_PREFIX}{os.getpid()}-"
                self._base_dir = tempfile.mkdtemp(prefix=prefix)
            # 0711: run uids may enter their own dir but not list the others.
            os.chmod(self._base_dir, 0o711)
            return self._base_dir


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


# Closed at interpreter exit, so pre-started interpreters are ended and reaped
# by us rather than orphaned (not every init reaps its adopted children).
_open_instances: weakref.WeakSet[LocalSandbox] = weakref.WeakSet()


@atexit.register
def _close_open_instances() -> None:
    for sandbox in list(_open_instances):
        with contextlib.suppress(Exception):
            sandbox.close()


_spawner_lock = threading.Lock()
_spawner_pool: tuple[int, ThreadPoolExecutor] | None = None


def _spawner() -> ThreadPoolExecutor:
    """One thread that lives as long as the process and starts long-lived sandboxes.

    bwrap's --die-with-parent and the supervisor's parent-death signal fire
    when the *thread* that started them exits, not the process; a pre-started
    interpreter or a session started from a short-lived thread would be killed
    with it.
    """
    global _spawner_pool
    with _spawner_lock:
        if _spawner_pool is None or _spawner_pool[0] != os.getpid():  # new after a fork
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airlock-sandbox-spawner")
            _spawner_pool = (os.getpid(), pool)
        return _spawner_pool[1]


def _memfd_with(data: bytes) -> int:
    """An anonymous file holding ``data``, for bwrap to read (code, seccomp filter)."""
    fd = os.memfd_create("airlock-sandbox", 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
