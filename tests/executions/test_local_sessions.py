"""Persistent sessions on the local backend: state kept between executes, never shared.

The same confinement methods as ``test_local_sandbox``; scripts/test runs both
as an ordinary user too, with and without bubblewrap.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from executions.sandboxes.base import Limits, MemorySink, SandboxError, UnsupportedLanguage
from executions.sandboxes.sessions import SessionRegistry, open_session
from tests.executions.test_local_sandbox import LOCAL_METHODS, host_processes_with, open_sandbox


@pytest.fixture(scope="module", params=LOCAL_METHODS)
def sandbox(request):
    yield from open_sandbox(request.param)


@pytest.fixture
def session(sandbox):
    opened = sandbox.open_session("python", Limits(timeout_seconds=5))
    yield opened
    opened.close()


def execute(session, code, **limits):
    sink = MemorySink()
    outcome = session.execute(code, sink, limits=Limits(**{"timeout_seconds": 5, **limits}))
    return outcome, sink


def test_session_state_survives_between_executes(session):
    assert execute(session, "x = 41")[0].success
    outcome, sink = execute(session, "print(x + 1)")
    assert outcome.success and sink.stdout == "42\n"
    assert outcome.details["session"] == session.id


def test_sessions_do_not_see_each_others_state(sandbox, session):
    execute(session, "secret = 'mine'")
    other = sandbox.open_session()
    try:
        outcome, sink = execute(other, "print(secret)")
        assert outcome.exit_code == 1 and "NameError" in sink.stderr
        outcome, sink = execute(other, "import os\nprint(os.getpid(), os.getuid())")
        assert outcome.success
    finally:
        other.close()
    assert execute(session, "print(secret)")[1].stdout == "mine\n"


def test_a_failing_snippet_keeps_the_session(session):
    execute(session, "y = 1")
    outcome, sink = execute(session, "1 / 0")
    assert outcome.exit_code == 1 and "ZeroDivisionError" in sink.stderr
    assert "<snippet 2>" in sink.stderr
    assert execute(session, "print(y)")[1].stdout == "1\n"


def test_a_session_snippet_can_exit_with_a_code(session):
    assert execute(session, "raise SystemExit(4)")[0].exit_code == 4
    assert execute(session, "print('still here')")[1].stdout == "still here\n"


def test_a_session_timeout_interrupts_the_snippet_and_keeps_the_state(session):
    execute(session, "z = 'kept'")
    outcome, sink = execute(
        session, "import time\nwhile True:\n    time.sleep(0.05)", timeout_seconds=1
    )
    assert outcome.timed_out and "KeyboardInterrupt" in sink.stderr
    assert execute(session, "print(z)")[1].stdout == "kept\n"


def test_a_worker_that_ignores_sigint_and_sighup_still_interrupts_at_the_timeout(sandbox):
    """nohup, or `cmd &` from a script, leaves SIGINT and SIGHUP ignored in the worker, and
    an ignored signal survives exec: the sandbox starts its code with the defaults."""
    ignored = (signal.SIGINT, signal.SIGHUP)
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in ignored}
    try:
        session = sandbox.open_session("python", Limits(timeout_seconds=5))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    try:
        execute(session, "z = 'kept'")
        code = "import time\nwhile True:\n    time.sleep(0.05)"
        outcome, sink = execute(session, code, timeout_seconds=1)
        assert outcome.timed_out and "KeyboardInterrupt" in sink.stderr, sink.stderr
        assert execute(session, "print(z)")[1].stdout == "kept\n"
        hangup = "import signal\nprint(int(signal.getsignal(signal.SIGHUP)))"
        assert execute(session, hangup)[1].stdout == f"{int(signal.SIG_DFL)}\n"
    finally:
        session.close()


def test_a_snippet_that_ignores_the_interrupt_ends_the_session(session):
    code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)"
    outcome, _ = execute(session, code, timeout_seconds=1)
    assert outcome.timed_out and session.closed
    outcome, _ = execute(session, "print(1)")
    assert outcome.error == "the session is closed"


def test_a_crashing_session_reports_and_closes(session):
    outcome, _ = execute(session, "import os\nos._exit(9)")
    assert outcome.exit_code is not None and not outcome.success
    assert session.closed


def test_session_output_streams_and_is_capped(session):
    sink = MemorySink(cap_bytes=100)
    outcome = session.execute("print('a' * 1000)\nprint('b')", sink)
    assert outcome.success and sink.truncated and sink.stdout == "a" * 100


def test_closing_a_session_ends_what_it_started(session):
    tag = f"airlock-session-{os.getpid()}-{time.monotonic_ns()}"
    code = f"import os\nif os.fork() == 0:\n    os.setsid()\n    os.execv('/bin/sleep', ['{tag}', '60'])\n"
    assert execute(session, code)[0].success
    time.sleep(0.2)
    assert host_processes_with(tag)
    session.close()
    assert not host_processes_with(tag)


def test_a_session_outlives_the_thread_that_opened_it(sandbox):
    opened = []
    thread = threading.Thread(target=lambda: opened.append(sandbox.open_session()))
    thread.start()
    thread.join()
    try:
        time.sleep(0.3)
        outcome, sink = execute(opened[0], "print('alive')")
        assert outcome.success and sink.stdout == "alive\n"
    finally:
        opened[0].close()


def test_sessions_support_python_only(sandbox):
    with pytest.raises(UnsupportedLanguage):
        sandbox.open_session("bash")


def test_a_closed_session_refuses_to_execute(sandbox):
    opened = sandbox.open_session()
    opened.close()
    outcome, _ = execute(opened, "print(1)")
    assert outcome.error and not outcome.success


def test_the_registry_lists_gets_and_destroys_sessions(sandbox):
    registry = SessionRegistry(idle_seconds=600, max_sessions=2)
    first = registry.create(sandbox)
    try:
        assert registry.get(first.id) is first
        assert [entry["id"] for entry in registry.list()] == [first.id]
        assert registry.list()[0]["backend"] == "local"
        second = registry.create(sandbox)
        with pytest.raises(SandboxError, match="too many"):
            registry.create(sandbox)
        assert registry.destroy(second.id) and second.closed
        assert registry.get(second.id) is None
        assert not registry.destroy(second.id)
    finally:
        registry.close_all()
    assert first.closed and registry.list() == []


def test_the_registry_reaps_idle_sessions(sandbox):
    registry = SessionRegistry(idle_seconds=60)
    idle, busy = registry.create(sandbox), registry.create(sandbox)
    try:
        idle.last_used -= 120  # as if unused for two minutes
        execute(busy, "pass")
        assert registry.reap_idle() == 1
        assert idle.closed and registry.get(idle.id) is None
        assert registry.get(busy.id) is busy
    finally:
        registry.close_all()


def test_a_backend_without_sessions_says_so():
    class NoSessions:
        name = "plain"

    with pytest.raises(SandboxError, match="plain sandbox backend does not offer"):
        open_session(NoSessions())
