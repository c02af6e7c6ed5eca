"""``LocalSandbox``: the local backend (see the package's docstring for the layers)."""

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
from typing import ClassVar

from ..base import (
    Availability,
    Limits,
    OutputSink,
    RunOutcome,
    RunRequest,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
)
from ..sessions import Session
from . import probes
from .confinement import (
    SANDBOX_WORKDIR,
    SUPERVISOR,
    _landlock_rules,
    _memfd_with,
    _namespace_layout,
    _supervisor_config,
    bwrap_args,
)
from .host import (
    BASE_DIR_PREFIX,
    SYSTEM_PATH,
    _drop_privileges_kwargs,
    _is_root,
    _new_run_uid,
    _remove_stale_base_dirs,
    default_signals_prefix,
    launch_prefix,
)
from .probes import METHODS
from .process import SandboxProcess, drain_output, pump_output
from .programs import Program, _extra_binds, resolve_program
from .rlimits import _apply_rlimits, _relative_nproc, rlimits_for
from .seccomp import seccomp_program
from .sessions import open_local_session

WARM_KEYS_KEPT = 4  # distinct (language, limits) combinations with pre-started interpreters
WARM_PER_KEY = 2  # pre-started interpreters kept for each of them
NO_NETWORK = (
    "the local backend gives scripts no network: a run would share the host's, where "
    "the console, Redis and PostgreSQL listen; use the docker or gvisor backend"
)


class LocalSandbox(Sandbox):
    """Runs code as a local subprocess; see the module docstring for the layers."""

    name: ClassVar[str] = "local"

    def __init__(self, method: str | None = None, base_dir: str | None = None):
        """``method``: one of ``METHODS``, or None for the strongest that works here."""
        problems = probes.method_problems()
        if method is None:
            method = next(name for name, problem in problems.items() if problem is None)
        elif method not in METHODS:
            raise SandboxUnavailable(f"unknown local method {method!r}; use one of {list(METHODS)}")
        elif problems[method]:
            raise SandboxUnavailable(f"local method {method!r} is unusable: {problems[method]}")
        self.method = method
        self.isolation = METHODS[method]
        self.bwrap, _, self.bwrap_flags = probes._bwrap_features()
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
        problems = probes.method_problems()
        method = next(name for name, problem in problems.items() if problem is None)
        reason = probes.describe_method(method)
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

        ``warm`` starts the interpreter with ``PY_LOADER`` and no script: it waits
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
        argv = [self.bwrap, *bwrap_args(program, limits, code_fd, script, self.bwrap_flags)]
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
        argv = default_signals_prefix() + (argv if prefix is None else prefix + argv)
        try:
            popen = self._popen(
                argv,
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
