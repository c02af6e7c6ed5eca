"""Airlock's resident runner: PID 1 of a sandbox container.

It receives run requests on stdin and answers on stdout, both attached by the
host through the Docker API (never the docker socket inside the container).
Per run it forks and execs the interpreter in a fresh working dir, streams
output frames as they are produced, enforces the wall timeout, and afterwards
kills every other process in the container (``kill(-1)`` from PID 1 spares
only itself), wipes /tmp, /dev/shm and /work, and reports whether the
container is clean enough to be reused.

Protocol (all integers big-endian):
  host -> runner: u32 length + JSON  {"op": "run", ...} | {"op": "cancel"} | {"op": "exit"}
  runner -> host: u8 type + u32 length + payload
      R  ready (JSON)      1  stdout bytes      2  stderr bytes
      X  run ended (JSON)  !  runner error (JSON)

Standard library only: it runs on Debian's python3 and on python:3.11-slim.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import selectors
import shutil
import signal
import stat
import struct
import sys
import time

FRAME = struct.Struct("!cI")
LENGTH = struct.Struct("!I")
READ_SIZE = 256 * 1024
WORK_ROOT = "/work"
WIPED = ("/tmp", "/dev/shm", WORK_ROOT)
REAP_SECONDS = 3.0
RUN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TMPDIR": "/tmp",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "NODE_DISABLE_COLORS": "1",
}
INTERPRETERS = {
    "python": (["python3", "-I", "-S"], "main.py"),  # unbuffered by PY_BOOT
    "bash": (["bash", "--noprofile", "--norc"], "main.sh"),
    "javascript": (["node"], "main.js"),
}
# Runs share our uid and may signal us. Linux shields a namespace's PID 1 from
# signals it does not handle; gVisor does not, so we ignore them explicitly.
IGNORED_SIGNALS = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGVTALRM,
    signal.SIGPROF,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)
# Restored in every run: ignored signals would otherwise stay ignored across exec.
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, *IGNORED_SIGNALS)


def send(kind: bytes, payload: bytes = b"") -> None:
    data = FRAME.pack(kind, len(payload)) + payload
    view = memoryview(data)
    while view:
        try:
            written = os.write(1, view)
        except InterruptedError:
            continue
        view = view[written:]


def send_json(kind: bytes, obj: dict) -> None:
    send(kind, json.dumps(obj).encode())


class Inbox:
    """Reassembles length-prefixed JSON messages from stdin."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.closed = False

    def feed(self) -> list[dict]:
        try:
            data = os.read(0, 65536)
        except BlockingIOError:
            return []
        if not data:
            self.closed = True
            return []
        self.buffer += data
        return self.messages()

    def discard_pending(self) -> None:
        """Drop whatever arrived during a run and was not a cancel.

        The host sends nothing but cancels until our report, so anything still
        here was written by the run itself (gVisor lets it open /proc/1/fd/0):
        it must not become, or garble, the next request.
        """
        os.set_blocking(0, False)
        try:
            while os.read(0, 65536):
                pass
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(0, True)
        self.buffer.clear()

    def messages(self) -> list[dict]:
        found = []
        while len(self.buffer) >= LENGTH.size:
            (size,) = LENGTH.unpack_from(self.buffer)
            if len(self.buffer) < LENGTH.size + size:
                break
            raw = bytes(self.buffer[LENGTH.size : LENGTH.size + size])
            del self.buffer[: LENGTH.size + size]
            found.append(json.loads(raw))
        return found


def make_undumpable() -> bool:
    """Runs share our uid: without this they could ptrace us or open /proc/1/fd/*.

    Returns whether it took; the host never reuses a container whose runner is exposed.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
        return prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except (OSError, AttributeError):
        return False


def write_code(request: dict, seq: int) -> tuple[list[str], str]:
    """The interpreter argv and the code's file; the code never shows in argv."""
    argv, filename = INTERPRETERS[request["language"]]
    folder = os.path.join(WORK_ROOT, f".code-{seq}")
    os.mkdir(folder, 0o700)
    path = os.path.join(folder, filename)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
        fh.write(request["code"])
    if request["language"] == "python":
        return [*argv, "-c", PY_BOOT, path], path
    return [*argv, path], path


def child(
    argv: list[str], cwd: str, limits: dict | None, out_w: int, err_w: int, ctl_r: int
) -> None:
    """In the forked child: become a session leader under limits, then exec."""
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        if ctl_r >= 0:
            os.dup2(ctl_r, 3)
        os.chdir(cwd)
        for sig in DEFAULT_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for name, value in (limits or {}).items():
            resource.setrlimit(RLIMITS[name], value)
        env = dict(RUN_ENV, HOME=cwd, PWD=cwd)
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:  # noqa: BLE001 - anything here must end in _exit
        with contextlib.suppress(Exception):
            os.write(2, f"sandbox: cannot start {argv[0]}: {exc}\n".encode())
    finally:
        os._exit(127)


def spawn(argv: list[str], cwd: str, out_w: int, err_w: int, ctl_r: int) -> int:
    """``child``'s set-up without a fork of this process: a session of its own, stdin from
    /dev/null, the pipes on 1, 2 and 3, default signals, ``cwd``, the run's environment."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
        (os.POSIX_SPAWN_DUP2, ctl_r, 3),
    ]
    here = os.getcwd()
    os.chdir(cwd)  # inherited: posix_spawn takes no directory
    try:
        pid = os.posix_spawnp(
            argv[0], argv, dict(RUN_ENV, HOME=cwd, PWD=cwd), file_actions=actions,
            setsid=True, setsigdef=DEFAULT_SIGNALS, setsigmask=(),
        )  # fmt: skip
    finally:
        os.chdir(here)
    return pid


def fork_child(argv: list[str], cwd: str, limits: dict | None, *fds: int) -> int:
    """``child`` in a fork of this process; returns once it has exec'd (or failed to)."""
    exec_r, exec_w = os.pipe()  # close-on-exec: its end closes with the exec
    pid = os.fork()
    if pid == 0:
        os.close(exec_r)
        child(argv, cwd, limits, *fds)
    os.close(exec_w)
    try:
        os.read(exec_r, 1)
    finally:
        os.close(exec_r)
    return pid


def prefer_for_oom(pid: int) -> None:
    """The run, never the runner, is what the OOM killer takes. Written from here once the
    child has exec'd: until then it is undumpable like us, and its /proc files are root's."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/oom_score_adj", "w") as fh:
        fh.write("1000")


# Every Python run starts here. Started ahead of the next run (after the
# previous run's clean-up), it blocks on fd 3 until it is told which file to
# run: a run then costs no interpreter start-up; started for a run, it is given
# the file. It executes the file as __main__ would. Its stdout and stderr write
# each write at once, as -u's do, but through a buffer: -u's streams drop the
# rest of a write that a signal cuts short (larger than the pipe has room for,
# while the script handles a signal), and a buffer writes it.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot.py")) as _boot:
    PY_BOOT = _boot.read()  # given as -c: __main__ starts as a bare module
RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "core": resource.RLIMIT_CORE,
    "nproc": resource.RLIMIT_NPROC,
}


def rlimits_for(request: dict) -> dict[str, tuple[int, int]]:
    file_bytes = int(request.get("max_file_size_mb", 16)) * 1024 * 1024
    cpu = int(request.get("cpu_seconds", 31))
    limits = {"cpu": (cpu, cpu + 1), "fsize": (file_bytes, file_bytes), "core": (0, 0)}
    if request.get("max_processes"):
        nproc = int(request["max_processes"])
        limits["nproc"] = (nproc, nproc)
    return limits


class Spawned:
    """A child: its pid, output pipes and, for a prestarted one, the control pipe.

    A run's own child is forked (``child`` sets its limits before the exec). A
    prestarted interpreter, which has no limits until ``go``, is spawned
    (``posix_spawn``: the runner's memory is not copied, which under gVisor
    costs a fork of this process, 20-30 ms) with the same session, fds,
    signals, directory and environment as ``child`` gives.
    """

    def __init__(self, seq: int, argv: list[str], limits: dict | None, control: bool) -> None:
        self.seq = seq
        self.cwd = os.path.join(WORK_ROOT, f"run-{seq}")
        os.mkdir(self.cwd, 0o700)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, self.ctl_w = os.pipe() if control else (-1, -1)
        try:
            if control and limits is None:
                self.pid = spawn(argv, self.cwd, out_w, err_w, ctl_r)
            else:
                self.pid = fork_child(argv, self.cwd, limits, out_w, err_w, ctl_r)
        finally:
            for fd in (out_w, err_w, ctl_r):
                if fd >= 0:
                    os.close(fd)
        prefer_for_oom(self.pid)
        self.streams = {out_r: b"1", err_r: b"2"}

    def alive(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] == 0
        except ChildProcessError:
            return False

    def go(self, path: str, limits: dict) -> None:
        """Apply the run's limits to the waiting interpreter, then hand it the file."""
        for name, value in limits.items():
            resource.prlimit(self.pid, RLIMITS[name], value)
        os.write(self.ctl_w, path.encode())
        os.close(self.ctl_w)
        self.ctl_w = -1

    def discard(self) -> None:
        for fd in [*self.streams, self.ctl_w]:
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)


def prestart_python(seq: int) -> Spawned | None:
    try:
        return Spawned(seq, [*INTERPRETERS["python"][0], "-c", PY_BOOT], None, control=True)
    except OSError:
        return None  # the run will fork its interpreter the ordinary way


def kill_everything(main_pid: int) -> tuple[int | None, bool]:
    """SIGKILL every process but us, reap them all; return the main status and cleanliness."""
    status = None
    deadline = time.monotonic() + REAP_SECONDS
    while time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == main_pid:
                status = raw
        if not other_processes():
            return status, True
        time.sleep(0.002)
    return status, False


def other_processes() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _force_remove(func, path, _exc) -> None:
    # A run may have chmod-ed a dir to 0; we share its uid, so give it back.
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path) or "/", stat.S_IRWXU)
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IRWXU)
    with contextlib.suppress(OSError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def wipe() -> bool:
    """Empty every writable place; True when all of them are empty afterwards."""
    clean = True
    for root in WIPED:
        with contextlib.suppress(OSError):
            os.chmod(root, 0o1777 if root != WORK_ROOT else 0o700)
        try:
            entries = os.listdir(root)
        except OSError:
            clean = False
            continue
        for name in entries:
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, onerror=_force_remove)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        with contextlib.suppress(OSError):
            clean = clean and not os.listdir(root)
    return clean


class Run:
    """One request: fork, stream, watch timeout and cancel, clean up."""

    def __init__(
        self, request: dict, seq: int, inbox: Inbox, wake_r: int, ready: Spawned | None
    ) -> None:
        self.request = request
        self.seq = seq
        self.inbox = inbox
        self.wake_r = wake_r
        self.ready = ready
        self.timed_out = False
        self.cancelled = False
        self.exiting = False
        self.status: int | None = None
        self.pid = 0
        self.started = time.monotonic()

    def execute(self) -> dict:
        try:
            spawned = self.spawn()
        except (KeyError, OSError) as exc:
            kill_everything(0)
            return self.report(None, wipe(), error=f"cannot start the run: {exc}")
        self.pid = spawned.pid
        pumped_clean = self.pump(dict(spawned.streams))
        status, reaped_clean = kill_everything(self.pid)
        if self.status is None:
            self.status = status
        return self.report(self.status, pumped_clean and reaped_clean and wipe())

    def spawn(self) -> Spawned:
        limits = rlimits_for(self.request)
        ready, self.ready = self.ready, None
        if ready and self.request.get("language") == "python" and ready.alive():
            _, path = write_code(self.request, ready.seq)
            ready.go(path, limits)
            return ready
        if ready:
            ready.discard()  # another language: the waiting interpreter dies with the run
        # seq belongs to the prestarted interpreter (its folders exist); use the next one.
        argv, _ = write_code(self.request, self.seq + 1)
        return Spawned(self.seq + 1, argv, limits, control=False)

    def pump(self, streams: dict[int, bytes]) -> bool:
        """Forward output until the main process ended and every pipe closed."""
        selector = selectors.DefaultSelector()
        for fd in streams:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        selector.register(0, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        deadline = self.started + float(self.request.get("timeout", 30))
        open_streams = dict(streams)
        killed_at = None
        while open_streams or self.status is None:
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                self.timed_out = True
                self.kill_all()
            if killed_at is None and (self.timed_out or self.cancelled or self.status is not None):
                killed_at = now
            if killed_at is not None and now - killed_at > REAP_SECONDS:
                break  # something survived SIGKILL: report unclean, the host recycles us
            limit = deadline if killed_at is None else killed_at + REAP_SECONDS
            for key, _ in selector.select(max(0.0, limit - now)):
                if key.fd == 0:
                    self.on_message()
                elif key.fd == self.wake_r:
                    self.on_child()
                else:
                    self.on_output(key.fd, open_streams, selector)
        selector.close()
        for fd in open_streams:
            os.close(fd)
        return not open_streams

    def on_message(self) -> None:
        for message in self.inbox.feed():
            if message.get("op") == "cancel":
                self.cancelled = True
            elif message.get("op") == "exit":
                self.cancelled = self.exiting = True
        if self.inbox.closed:
            self.cancelled = self.exiting = True
            os.set_blocking(0, True)
        if self.cancelled:
            self.kill_all()

    def on_child(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_r, 4096)
        if self.status is None:
            with contextlib.suppress(ChildProcessError):
                done, raw = os.waitpid(self.pid, os.WNOHANG)
                if done == self.pid:
                    self.status = raw
        if self.status is not None:
            # The main process is gone: whatever it left running dies now, which
            # also closes the pipes it might still hold.
            self.kill_all()

    def on_output(self, fd: int, open_streams: dict, selector) -> None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        if data:
            send(open_streams[fd], data)
            return
        selector.unregister(fd)
        os.close(fd)
        del open_streams[fd]
        if not open_streams and self.status is None:
            self.status_from_wait()

    def status_from_wait(self) -> None:
        # Pipes closed but no SIGCHLD yet: usually the exit is a moment away.
        with contextlib.suppress(ChildProcessError):
            for _ in range(50):
                pid, raw = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = raw
                    self.kill_all()
                    return
                time.sleep(0.0005)

    def kill_all(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)

    def report(self, status: int | None, clean: bool, error: str | None = None) -> dict:
        exit_code = None
        if status is not None:
            exit_code = os.waitstatus_to_exitcode(status)
        return {
            "exit_code": exit_code,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled and not self.timed_out,
            "clean": clean and not self.exiting,
            "duration_ms": int((time.monotonic() - self.started) * 1000),
            # Echoed so the host can tell our report from one a run forged: gVisor
            # lets a same-uid process open /proc/1/fd/1, never our memory.
            "nonce": self.request.get("nonce"),
            "error": error,
        }


def main() -> None:
    guarded = make_undumpable()
    for sig in IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    os.makedirs(WORK_ROOT, exist_ok=True)
    wipe()
    inbox = Inbox()
    seq = 1
    ready = prestart_python(seq)
    send_json(b"R", {"pid": os.getpid(), "guarded": guarded, "python": sys.version.split()[0]})
    while True:
        messages = inbox.messages()
        while not messages and not inbox.closed:
            try:
                messages = inbox.feed()
            except InterruptedError:
                continue
        if inbox.closed and not messages:
            return
        for message in messages:
            if message.get("op") == "exit":
                return
            if message.get("op") == "run":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)  # stale wake-ups from before this run
                result = Run(message, seq, inbox, wake_r, ready).execute()
                inbox.discard_pending()
                seq += 2  # a run uses seq (prestarted) or seq + 1 (forked afresh)
                ready = None
                send_json(b"X", result)  # the caller has its answer; warming up is ours
                if inbox.closed or not result["clean"]:
                    return
                ready = prestart_python(seq)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - report, then die: the host recycles us
        with contextlib.suppress(Exception):
            send_json(b"!", {"error": f"{type(exc).__name__}: {exc}"})
        sys.exit(1)
