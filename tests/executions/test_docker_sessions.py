"""Persistent sessions on the Docker and gVisor backends, against the real engine.

Each session is a container of its own running the session runner; the host
drives it over the container's attached stdin/stdout. Skips (or fails under
CI=true) where the engine, the image or runsc is missing.
"""

from __future__ import annotations

import threading
import time

import docker
import pytest

from executions.sandboxes import reaper
from executions.sandboxes.base import Limits, MemorySink, UnsupportedLanguage
from executions.sandboxes.docker import DockerSandbox
from executions.sandboxes.gvisor import GVisorSandbox
from executions.sandboxes.sessions import SessionRegistry
from tests.executions.conftest import require_backend
from tests.support import assert_container_removed


@pytest.fixture(params=["docker", "gvisor"])
def sandbox(request, make_sandbox):
    require_backend(request.param)
    cls = {"docker": DockerSandbox, "gvisor": GVisorSandbox}[request.param]
    return make_sandbox(cls, mode="keepalive", spare=False)


@pytest.fixture
def open_session(sandbox):
    opened = []

    def open_(**limits):
        session = sandbox.open_session("python", Limits(**limits) if limits else None)
        opened.append(session)
        return session

    yield open_
    for session in opened:
        session.close()


def execute(session, code, cancel=None, **limits):
    sink = MemorySink()
    outcome = session.execute(code, sink, cancel, Limits(**limits) if limits else None)
    return outcome, sink


def container_of(session) -> str:
    return session._transport.container


def test_state_survives_between_executes(open_session):
    session = open_session()
    first, _ = execute(session, "x = 41")
    assert first.success, first
    second, sink = execute(session, "print(x + 1)")
    assert second.success and sink.stdout == "42\n"
    assert second.details["session"] == session.id
    assert second.details["mode"] == "session"


def test_output_and_errors_come_back_like_plain_python(open_session):
    session = open_session()
    outcome, sink = execute(session, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (outcome.exit_code, sink.stdout, sink.stderr) == (0, "out\n", "err\n")
    outcome, sink = execute(session, "def f():\n    raise ValueError('boom')\nf()")
    assert outcome.exit_code == 1 and not outcome.success
    assert "ValueError: boom" in sink.stderr and "Traceback" in sink.stderr
    outcome, _ = execute(session, "raise SystemExit(3)")
    assert outcome.exit_code == 3 and not session.closed


def test_two_sessions_never_see_each_others_state(open_session):
    one, two = open_session(), open_session()
    assert container_of(one) != container_of(two)
    execute(one, "secret = 'one'\nopen('/tmp/planted', 'w').write('one')")
    outcome, sink = execute(two, "print(secret)")
    assert outcome.exit_code == 1 and "NameError" in sink.stderr
    outcome, sink = execute(two, "import os\nprint(os.path.exists('/tmp/planted'))")
    assert sink.stdout == "False\n"
    outcome, sink = execute(one, "print(secret, open('/tmp/planted').read())")
    assert sink.stdout == "one one\n"


def test_a_timeout_interrupts_the_snippet_and_keeps_the_session(open_session):
    session = open_session()
    execute(session, "x = 41")
    started = time.monotonic()
    outcome, sink = execute(
        session, "import time\nwhile True:\n    time.sleep(0.05)", timeout_seconds=1
    )
    assert outcome.timed_out and not outcome.success
    assert time.monotonic() - started < 5
    assert "KeyboardInterrupt" in sink.stderr
    assert not session.closed
    outcome, sink = execute(session, "print(x + 1)")
    assert outcome.success and sink.stdout == "42\n"


def test_cancel_interrupts_the_snippet_and_keeps_the_session(open_session):
    session = open_session()
    execute(session, "x = 41")
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    outcome, _ = execute(session, "while True:\n    pass", cancel=cancel)
    assert outcome.cancelled and not outcome.timed_out
    assert time.monotonic() - started < 3
    outcome, sink = execute(session, "print(x + 1)")
    assert sink.stdout == "42\n"


def test_a_snippet_that_ignores_the_interrupt_ends_the_session_and_its_container(
    open_session,
):
    session = open_session()
    container = container_of(session)
    code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.05)"
    outcome, _ = execute(session, code, timeout_seconds=1)
    assert outcome.timed_out and session.closed
    assert_container_removed(container)
    outcome, _ = execute(session, "print(1)")
    assert outcome.error == "the session is closed"


def test_close_removes_the_container(open_session):
    session = open_session()
    container = container_of(session)
    assert docker.from_env().api.inspect_container(container)["State"]["Running"]
    session.close()
    assert session.closed
    assert_container_removed(container)


def test_closing_the_backend_closes_its_sessions(sandbox):
    session = sandbox.open_session()
    container = container_of(session)
    sandbox.close()
    assert_container_removed(container)
    outcome, _ = execute(session, "print(1)")
    assert not outcome.success


def test_a_session_that_exits_reports_it_and_its_container_goes(open_session):
    session = open_session()
    container = container_of(session)
    outcome, _ = execute(session, "import os\nos._exit(0)")
    assert outcome.error == "the session ended" and session.closed
    assert_container_removed(container)


def test_a_sessions_snippet_has_no_network(open_session):
    session = open_session()
    code = """
import socket
for target in (("1.1.1.1", 53), ("169.254.169.254", 80), ("172.17.0.1", 2375)):
    try:
        socket.create_connection(target, timeout=2).close()
        print("REACHED", target)
    except OSError as exc:
        print("blocked", target[0])
try:
    socket.getaddrinfo("example.com", 80)
    print("RESOLVED")
except OSError:
    print("no dns")
print(sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]))
"""
    outcome, sink = execute(session, code)
    assert outcome.success, sink.stderr
    assert "REACHED" not in sink.stdout and "RESOLVED" not in sink.stdout
    assert sink.stdout.count("blocked") == 3 and "no dns" in sink.stdout
    assert sink.stdout.strip().endswith("['lo']")


def test_session_containers_are_locked_down(open_session, sandbox):
    session = open_session()
    attrs = docker.from_env().api.inspect_container(container_of(session))
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["Memory"] == host["MemorySwap"] > 0
    assert host["NanoCpus"] > 0 and host["PidsLimit"] > 0
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert not host["Privileged"] and not host["Binds"]
    assert host["PidMode"] == "" and host["IpcMode"] == "private"
    assert set(host["Tmpfs"]) == {"/tmp", "/work"}
    assert host["Runtime"] == (sandbox.runtime or "runc")
    assert attrs["Config"]["User"] == "10001:10001"
    labels = attrs["Config"]["Labels"]
    assert labels[reaper.LABEL] == "1"
    assert labels[reaper.OWNER_LABEL] == reaper.owner_label()
    assert labels["airlock.mode"] == "session" and labels["airlock.backend"] == sandbox.name
    outcome, sink = execute(
        session,
        "import os\nprint(os.getuid())\n"
        "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])\n"
        "try:\n    open('/etc/airlock-probe', 'w')\nexcept OSError:\n    print('read-only')",
    )
    assert sink.stdout.split() == ["10001", "0000000000000000", "read-only"], sink.stderr


def test_the_process_limit_holds_in_a_session(open_session):
    session = open_session(max_processes=8)
    code = """
import subprocess
procs = []
try:
    for _ in range(40):
        procs.append(subprocess.Popen(["sleep", "5"]))
    print("SPAWNED", len(procs))
except OSError:
    print("limited at", len(procs))
finally:
    for p in procs:
        p.kill()
        p.wait()
"""
    outcome, sink = execute(session, code)
    assert "limited at" in sink.stdout, (sink.stdout, sink.stderr)
    outcome, sink = execute(session, "print('still here')")
    assert sink.stdout == "still here\n"


def test_only_python_sessions(sandbox):
    with pytest.raises(UnsupportedLanguage):
        sandbox.open_session("bash")


def test_the_registry_drives_docker_sessions(sandbox):
    registry = SessionRegistry(idle_seconds=60)
    session = registry.create(sandbox, "python")
    container = container_of(session)
    execute(session, "x = 41")
    assert execute(registry.get(session.id), "print(x + 1)")[1].stdout == "42\n"
    assert registry.reap_idle(now=time.time() + 120) == 1
    assert_container_removed(container)


def test_a_flood_of_output_is_capped_and_the_session_goes_on(open_session):
    session = open_session()
    sink = MemorySink(cap_bytes=64 * 1024)
    code = "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * 100_000)\nprint('end')"
    outcome = session.execute(code, sink)
    assert outcome.success, outcome
    assert sink.truncated and len(sink.stdout) <= 64 * 1024
    outcome, sink = execute(session, "print('after')")
    assert sink.stdout == "after\n"
