"""Runs start clean: a deployment launched with SIGINT and SIGHUP ignored (``nohup``, or
``cmd &`` from a script) still interrupts a session's snippet at its timeout, and the
session keeps its state; the snippet sees SIGHUP at its default. Ignored signals survive
exec: the sandbox resets them (``test_local_sessions`` spawns from such a process)."""

from __future__ import annotations

import signal
import sys

import pytest

from executions.actions import ActionContext
from executions.actions.host import run_argv
from executions.sandboxes.base import Limits, MemorySink
from tests.serving import agent_token, manage, start_server

# What nohup and a non-interactive shell's `cmd &` do before exec'ing the command.
IGNORING = [
    sys.executable, "-c",
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])",
]  # fmt: skip


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("signals") / "data"
    server = start_server(data_dir, wrapper=IGNORING)
    manage(data_dir, "policy", "apply", str(_allow_all(data_dir)))
    server.agent = agent_token(data_dir, "sessions-bot", "sandbox.*")
    yield server
    server.stop()


def _allow_all(data_dir):
    path = data_dir / "allow.yaml"
    text = manage(data_dir, "policy", "export")
    path.write_text(
        text.replace(
            "allow:\n",
            "allow:\n- kind: action\n  pattern: sandbox.execute\n  note: signals test\n",
            1,
        )
    )
    return path


def run(deployment, session_id: int, code: str, timeout: int = 30) -> dict:
    status, proposal = deployment.api(
        "POST",
        f"/api/v1/sandboxes/{session_id}/execute",
        {"code": code, "timeout_seconds": timeout},
        token=deployment.agent,
    )
    assert status == 201 and proposal["status"] == "approved", proposal
    _, proposal = deployment.api(
        "GET", f"/api/v1/proposals/{proposal['id']}?wait=60&until=finished", token=deployment.agent
    )
    _, result = deployment.api(
        "GET", f"/api/v1/executions/{proposal['execution_id']}", token=deployment.agent
    )
    return result


def test_the_session_timeout_interrupts_and_keeps_the_state_whatever_the_worker_ignored(
    deployment,
):
    status, session = deployment.api(
        "POST", "/api/v1/sandboxes", {"language": "python"}, token=deployment.agent
    )
    assert status == 201, session
    assert run(deployment, session["id"], "z = 'kept'")["status"] == "succeeded"
    looped = run(deployment, session["id"], "import time\nwhile True:\n    time.sleep(0.05)", 1)
    assert looped["status"] == "timed_out", looped
    assert "KeyboardInterrupt" in looped["stderr"], looped
    assert run(deployment, session["id"], "print(z)")["stdout"] == "kept\n"
    hangup = run(deployment, session["id"], "import signal\nprint(int(signal.getsignal(1)))")
    assert hangup["stdout"] == f"{int(signal.SIG_DFL)}\n", hangup


def test_a_host_command_starts_with_the_signals_the_worker_ignored_at_their_defaults():
    """nohup, or `cmd &` from a script, leaves SIGINT and SIGHUP ignored in the worker; an
    ignored signal survives exec, and a command could no longer be interrupted."""
    probe = [sys.executable, "-c",
             "import signal\nprint(*(signal.getsignal(s) is signal.SIG_IGN for s in (1, 2)))"]  # fmt: skip
    ignored = (signal.SIGINT, signal.SIGHUP)
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in ignored}
    try:
        sink = MemorySink()
        outcome = run_argv(probe, ActionContext(sink=sink, limits=Limits(timeout_seconds=10)))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert outcome.success, sink.stderr
    assert sink.stdout == "False False\n"  # neither ignored any more


@pytest.mark.parametrize("program", ["airlock-no-such-program", "/nowhere/airlock-no-such"])
def test_a_missing_program_is_named_as_missing_from_a_worker_that_ignores_signals(program):
    """Through the prefix that resets the signals, a missing program would be env's exit 127:
    it is said as plainly as from any worker."""
    ignored = (signal.SIGINT, signal.SIGHUP)
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in ignored}
    try:
        sink = MemorySink()
        outcome = run_argv([program, "--flag"], ActionContext(sink=sink, limits=Limits()))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert outcome.exit_code == 1
    assert outcome.error == f"command not found: {program}"
