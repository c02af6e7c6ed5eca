"""What the adversarial suites share: running attack code, and checking the host after it."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from executions.sandboxes.base import Limits, MemorySink, RunOutcome, RunRequest, Sandbox
from tests.support import port_open

MB = 1024 * 1024


def with_limitations(config: str, instance, request, limitations: dict):
    """The sandbox of a test, marked a strict xfail where ``limitations`` says it cannot hold."""
    reason = limitations.get((config, request.node.originalname))
    if reason:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))
    return instance


def marker() -> str:
    return f"airlock-adv-{uuid.uuid4().hex[:12]}"


def run(
    sandbox: Sandbox,
    code: str,
    language: str = "python",
    cap: int = MB,
    cancel: threading.Event | None = None,
    sink: MemorySink | None = None,
    **limits,
) -> tuple[RunOutcome, MemorySink]:
    sink = sink if sink is not None else MemorySink(cap_bytes=cap)
    limits = {"timeout_seconds": 5, **limits}
    outcome = sandbox.run(RunRequest(language, code, Limits(**limits)), sink, cancel)
    return outcome, sink


# Code that lists a directory, or nothing where listing is refused: Landlock
# alone refuses to list /proc at all, which is containment, not an error.
LISTING = """
import os
def listing(path):
    try:
        return os.listdir(path)
    except OSError:
        return []
"""

CLEAN_CHECK = (
    LISTING
    + """
import subprocess
markers = {markers!r}
problems = []
for pid in listing("/proc"):
    if pid.isdigit():
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        problems += ["process %s" % pid for m in markers if m.encode() in cmdline]
problems += ["file " + p for p in {paths!r} if os.path.exists(p)]
if len(os.listdir(".")) > 3:
    problems.append("a used work dir: %s" % sorted(os.listdir("."))[:5])
blob = bytearray(32 * 1024 * 1024)
with open("probe.bin", "wb") as f:
    f.write(b"x" * 1024 * 1024)
if subprocess.run(["true"]).returncode != 0:
    problems.append("cannot start a process")
print(problems or "ok")
"""
)


def assert_next_run_is_clean(sandbox: Sandbox, markers=(), paths=()) -> None:
    """A normal run right after the attack: works, fresh, nothing of the attack visible."""
    code = CLEAN_CHECK.format(markers=list(markers), paths=list(paths))
    outcome, sink = run(sandbox, code, timeout_seconds=20)
    assert sink.stdout == "ok\n", (sink.stdout, sink.stderr[-2000:], outcome)
    assert outcome.success, (outcome, sink.stderr[-2000:])


def host_processes_with(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
    return found


def assert_no_host_process_with(text: str, grace: float = 1.0) -> None:
    deadline = time.monotonic() + grace
    while host_processes_with(text) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(text) == []


def assert_stopped_within(outcome: RunOutcome, timeout: float, slack: float = 5.0) -> None:
    # Slack covers a one-shot container's start and tear-down on a loaded machine.
    assert not outcome.success, outcome
    assert outcome.duration_ms < (timeout + slack) * 1000, outcome


@contextlib.contextmanager
def listener(host: str = "0.0.0.0") -> Iterator[int]:
    """A TCP listener the test can reach: proves the host side can connect."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, 0))
    server.listen(64)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def primary_ip() -> str:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent; picks the outbound address
        return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


CONNECT = """
import socket
for host, port in {targets!r}:
    try:
        socket.create_connection((host, port), timeout=2).close()
        print("CONNECTED", host, port)
    except OSError as exc:
        print("blocked", host, port, exc)
"""


def assert_no_connection(sandbox: Sandbox, targets: list[tuple[str, int]]) -> None:
    for host, port in targets:
        assert port_open(host, port, timeout=2), f"the test itself cannot reach {host}:{port}"
    outcome, sink = run(sandbox, CONNECT.format(targets=targets), timeout_seconds=15)
    assert "blocked" in sink.stdout, (outcome, sink.stdout, sink.stderr[-1000:])
    assert "CONNECTED" not in sink.stdout, sink.stdout
    assert_next_run_is_clean(sandbox)


def start_in_background(sandbox: Sandbox, code: str, **limits):
    """Run ``code`` in a thread; returns (thread, sink, cancel, results)."""
    sink, cancel, results = MemorySink(), threading.Event(), []
    thread = threading.Thread(
        target=lambda: results.append(run(sandbox, code, cancel=cancel, sink=sink, **limits)),
        daemon=True,
    )
    thread.start()
    return thread, sink, cancel, results


def wait_for_output(sink: MemorySink, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while text not in sink.stdout:
        assert time.monotonic() < deadline, f"no {text!r} in {sink.stdout!r} {sink.stderr!r}"
        time.sleep(0.02)


# --- attacks on the control plane --------------------------------------------------------

# Every attack tries each step and reports; an error is what containment looks like.
PRELUDE = (
    LISTING
    + """
import signal, socket, sqlite3
def step(what, action):
    try:
        result = action()
        print("REACHED", what, repr(result)[:200])
    except Exception as exc:
        print("blocked", what, type(exc).__name__, exc)
def read(path):
    with open(path, "rb") as f:
        return f.read(200)
def write(path):
    with open(path, "w") as f:
        f.write("escaped")
    return path
def query(db):
    return sqlite3.connect("file:%s?mode=rw" % db, uri=True, timeout=1).execute(
        "select name from sqlite_master").fetchall()
def hijack(db):
    c = sqlite3.connect("file:%s?mode=rw" % db, uri=True, timeout=1)
    c.execute("create table hijacked (x)")
    c.commit()
def connect(host, port):
    socket.create_connection((host, port), timeout=2).close()
def connect_unix(path):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
def processes_with(text):
    found = []
    for pid in listing("/proc"):
        if pid.isdigit():
            try:
                if text.encode() in read("/proc/%s/cmdline" % pid):
                    found.append(pid)
            except OSError:
                pass
    return found
"""
)


def attack(steps: list[tuple[str, str]], then: str = "") -> str:
    """Code that tries each (what, expression) step, prints REACHED for each success."""
    lines = [f"step({what!r}, lambda: {expression})" for what, expression in steps]
    return PRELUDE + "\n".join(lines) + "\n" + then + "print('tried')\n"


def database_steps(path: str) -> list[tuple[str, str]]:
    return [
        ("read the database file", f"read({path!r})"),
        ("query the database", f"query({path!r})"),
        ("write the database", f"hijack({path!r})"),
    ]


def port_steps(targets: list[tuple[str, int]], sockets: list[str]) -> list[tuple[str, str]]:
    steps = [(f"connect to {host}:{port}", f"connect({host!r}, {port})") for host, port in targets]
    return steps + [(f"connect to {path}", f"connect_unix({path!r})") for path in sockets]


def worker_steps(pid: int) -> list[tuple[str, str]]:
    return [
        ("read the worker environment", f"read('/proc/{pid}/environ')"),
        ("read the worker command line", f"read('/proc/{pid}/cmdline')"),
        ("stop the worker", f"os.kill({pid}, signal.SIGKILL)"),
    ]


def assert_contained(output: str, *secrets: str) -> None:
    """The attack ran to its end, reached nothing, and printed none of the secrets."""
    assert "tried" in output, output
    assert "REACHED" not in output, output
    for secret in secrets:
        assert secret not in output, output


# Attach to every other process a run can find (a sibling run, PID 1, the worker).
PTRACE = (
    LISTING
    + """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
mine = {{str(os.getpid())}}
targets = {{"1"}}
for pid in listing("/proc"):
    if pid.isdigit() and pid not in mine:
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if b"{marker}" in f.read():
                    targets.add(pid)
        except OSError:
            pass
targets.add("{worker_pid}")
print("targets", sorted(targets))
for pid in sorted(targets):
    if libc.ptrace(16, int(pid), 0, 0) == 0:  # PTRACE_ATTACH
        print("ATTACHED", pid)
        libc.ptrace(17, int(pid), 0, 0)  # PTRACE_DETACH
    else:
        print("denied", pid, os.strerror(ctypes.get_errno()))
"""
)
