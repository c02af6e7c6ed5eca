"""One sandboxed process tree: stopping it for good, cleaning up, and pumping its output."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import IO

from ..base import OutputSink
from . import host
from .host import RUN_UID_BASE, SYSTEM_PATH, _drop_privileges_kwargs

READ_CHUNK = 64 * 1024
POLL_SECONDS = 0.05  # how often a run checks its deadline and cancel event
KILL_GRACE_SECONDS = 1.0
SHARED_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


@dataclass
class SandboxProcess:
    """A started sandboxed process and everything needed to end and clean it up."""

    popen: subprocess.Popen
    isolation: str
    uid: int | None
    workdir: str | None  # host dir to remove (none with bubblewrap: it lives in a tmpfs)
    status_fd: int | None = None  # supervisor's report of the code's exit status
    info_fd: int | None = None  # bwrap --info-fd: the namespace's PID 1 and namespace ids
    details: dict = field(default_factory=dict)
    bwrap: bool = False  # started by bubblewrap (else by the supervisor)
    _stopped: bool = False
    _ns_init: int | None = None  # pidfd of bwrap's PID 1, once known

    @property
    def stdout(self) -> IO[bytes]:
        return self.popen.stdout  # type: ignore[return-value]

    @property
    def stderr(self) -> IO[bytes]:
        return self.popen.stderr  # type: ignore[return-value]

    @property
    def stdin(self) -> IO[bytes] | None:
        return self.popen.stdin

    def poll(self) -> int | None:
        return self.popen.poll()

    def stop(self) -> None:
        """End everything the code started; returns once it is gone (bounded)."""
        if self._stopped:
            return
        self._stopped = True
        if self.bwrap:
            if self.popen.poll() is not None and self._namespace_gone(0):
                return
            self._stop_namespace()
        elif self.popen.poll() is None:  # the supervisor exits only once all is gone
            self._stop_supervisor()
        else:
            return
        if self.uid is not None:
            _kill_uid(self.uid)

    def finished(self) -> None:
        """The code ended by itself: wait (bounded) until nothing of the run is left."""
        if self.bwrap and not self._namespace_gone(KILL_GRACE_SECONDS):
            self.stop()

    def _stop_namespace(self) -> None:
        # Killing bubblewrap's PID 1 makes the kernel kill every process of the
        # namespace; PID 1 finishes exiting only once they are all reaped.
        init = self._namespace_init()
        if init is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(init, signal.SIGKILL)
        if self.popen.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        self._namespace_gone(KILL_GRACE_SECONDS)

    def _namespace_init(self) -> int | None:
        """A pidfd for bwrap's PID 1 (bwrap may exit before it: it is not waited for)."""
        if self._ns_init is not None or self.info_fd is None:
            return self._ns_init
        info = _read_info(self.info_fd)
        pid, namespace = info.get("child-pid"), info.get("pid-namespace")
        if not pid:
            return None
        try:
            pidfd = os.pidfd_open(pid)
            # The pid could, in theory, belong to a new process by now.
            if os.readlink(f"/proc/{pid}/ns/pid") != f"pid:[{namespace}]":
                os.close(pidfd)
                return None
        except OSError:
            return None  # already gone
        self._ns_init = pidfd
        return pidfd

    def _namespace_gone(self, timeout: float) -> bool:
        init = self._namespace_init()
        if init is None:
            return True
        poller = select.poll()
        poller.register(init, select.POLLIN)
        return bool(poller.poll(int(timeout * 1000)))

    def _stop_supervisor(self) -> None:
        with contextlib.suppress(OSError):
            self.popen.send_signal(signal.SIGTERM)
        self._wait_or_kill()

    def _wait_or_kill(self) -> None:
        try:
            self.popen.wait(KILL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def exit_code(self) -> int | None:
        code = self.popen.wait()
        if self.status_fd is not None:
            with contextlib.suppress(OSError, ValueError):
                reported = os.read(self.status_fd, 32)
                if reported:
                    return int(reported)
            return None if self._stopped else code
        return code

    def cleanup(self) -> None:
        """Close pipes, remove the work dir and, for a run uid, anything it left in shared dirs."""
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe:
                with contextlib.suppress(OSError):
                    pipe.close()
        for fd in (self.status_fd, self.info_fd, self._ns_init):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.status_fd = self.info_fd = self._ns_init = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.uid is not None and self.isolation == "weak":
            _remove_files_of(self.uid)


def _read_info(fd: int) -> dict:
    """bwrap's --info-fd JSON, written right after it forks the namespace's PID 1."""
    data = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 4096):
            data += chunk
    try:
        return json.loads(data)
    except ValueError:
        return {}


@functools.cache
def _kill_binary() -> str | None:
    return shutil.which("kill", path=SYSTEM_PATH)


def _kill_uid(uid: int) -> None:
    """Backstop: SIGKILL every process of a run uid, as that uid (``kill -9 -1``)."""
    if uid < RUN_UID_BASE:
        raise ValueError(f"refusing to kill every process of uid {uid}: not a run uid")
    kill = _kill_binary()
    if kill is None:
        return
    setpriv, _ = host._launch_tools()
    argv = [kill, "-9", "-1"]
    kwargs = _drop_privileges_kwargs(uid)
    if setpriv:
        argv = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
        kwargs = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5, **kwargs
        )


def _remove_files_of(uid: int) -> None:
    """Without namespaces /tmp and /dev/shm are shared: remove what the run planted there."""
    for base in SHARED_TMP_DIRS:
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


# --- streaming ---------------------------------------------------------------


def pump_output(
    process: SandboxProcess,
    sink: OutputSink,
    deadline: float,
    cancel: threading.Event | None,
) -> str | None:
    """Copy output to the sink as it comes until the process ends.

    Returns ``"timeout"`` or ``"cancel"`` if the run must be stopped, else None.
    Keeps reading after the sink is full so the code never blocks on a full pipe.
    """
    selector = selectors.DefaultSelector()
    for name, pipe in (("stdout", process.stdout), ("stderr", process.stderr)):
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe.fileno(), selectors.EVENT_READ, name)
    try:
        while True:
            if cancel is not None and cancel.is_set():
                return "cancel"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            wait = min(POLL_SECONDS, remaining)
            if not selector.get_map():
                try:
                    process.popen.wait(wait)
                    return None
                except subprocess.TimeoutExpired:
                    continue
            for key, _ in selector.select(wait):
                _read_into(selector, key, sink)
    finally:
        selector.close()


def drain_output(process: SandboxProcess, sink: OutputSink, limit: float = 1.0) -> None:
    """After a stop: copy what is still in the pipes (every writer is dead, so EOF comes)."""
    deadline = time.monotonic() + limit
    selector = selectors.DefaultSelector()
    for name, pipe in (("stdout", process.stdout), ("stderr", process.stderr)):
        with contextlib.suppress(ValueError, OSError):
            selector.register(pipe.fileno(), selectors.EVENT_READ, name)
    try:
        while selector.get_map() and time.monotonic() < deadline:
            for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                _read_into(selector, key, sink)
    finally:
        selector.close()


def _read_into(
    selector: selectors.BaseSelector, key: selectors.SelectorKey, sink: OutputSink
) -> None:
    try:
        data = os.read(key.fd, READ_CHUNK)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if data:
        sink.write(key.data, data)
    else:
        selector.unregister(key.fd)
