"""Host actions with real processes.

systemd does not run here, so service actions run a real stand-in executable
(written into tmp_path, named by ``HOST_ACTIONS_SYSTEMCTL``) that records its
argv and environment and exits with a chosen code. ``kill_process`` signals real
processes the tests start under unique names, so nothing else on the machine
is ever touched; ``host.exec`` runs real commands.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework import serializers

from executions.actions import ActionContext, get_action
from executions.actions.host import SAFE_PATH, protected_pids
from executions.sandboxes.base import Limits, MemorySink

VERBS = {
    "host.restart_service": "restart",
    "host.stop_service": "stop",
    "host.start_service": "start",
    "host.service_status": "status",
}


class TimedSink(MemorySink):
    """Remembers when each chunk arrived."""

    def __init__(self, cap_bytes: int = 1024 * 1024):
        super().__init__(cap_bytes)
        self.arrivals: list[tuple[float, str, str]] = []

    def emit(self, stream: str, text: str) -> None:
        super().emit(stream, text)
        self.arrivals.append((time.monotonic(), stream, text))


def run(action: str, parameters: dict, sink: MemorySink | None = None, **context):
    """Validate like the API does, then carry the action out."""
    spec = get_action(action)
    sink = sink if sink is not None else MemorySink()
    outcome = spec.runner(spec.validate(parameters), ActionContext(sink=sink, **context))
    sink.close()
    return outcome, sink


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


# --- service actions against a stand-in systemctl -----------------------------


@pytest.fixture
def systemctl(tmp_path: Path, settings):
    """Install a stand-in systemctl; returns (path, calls) where calls() reads its records."""
    record = tmp_path / "calls.jsonl"

    def install(exit_code: int = 0) -> tuple[Path, callable]:
        path = tmp_path / "systemctl"
        path.write_text(
            textwrap.dedent(
                f"""\
                #!{sys.executable}
                import json, os, sys
                with open({str(record)!r}, "a") as f:
                    f.write(json.dumps({{"argv": sys.argv, "env": dict(os.environ)}}) + "\\n")
                print("unit says hello", flush=True)
                print("unit warns", file=sys.stderr, flush=True)
                sys.exit({exit_code})
                """
            )
        )
        path.chmod(0o755)
        settings.HOST_ACTIONS_SYSTEMCTL = str(path)

        def calls() -> list[dict]:
            if not record.exists():
                return []
            return [json.loads(line) for line in record.read_text().splitlines()]

        return path, calls

    return install


@pytest.mark.parametrize(("action", "verb"), sorted(VERBS.items()))
def test_service_actions_run_systemctl_with_exactly_verb_and_name(systemctl, action, verb):
    path, calls = systemctl(exit_code=0)

    outcome, sink = run(action, {"service_name": "getty@tty1.service"})

    assert outcome.success, sink.stderr
    assert outcome.backend == "host"
    assert [call["argv"] for call in calls()] == [[str(path), verb, "getty@tty1.service"]]
    assert sink.stdout == "unit says hello\n"
    assert sink.stderr == "unit warns\n"


def test_systemctl_gets_a_scrubbed_environment(systemctl, monkeypatch):
    monkeypatch.setenv("AIRLOCK_TEST_SECRET", "hunter2")
    _, calls = systemctl(exit_code=0)

    run("host.restart_service", {"service_name": "nginx"})

    env = calls()[0]["env"]
    assert "AIRLOCK_TEST_SECRET" not in env
    assert env["PATH"] == SAFE_PATH


@pytest.mark.parametrize(
    "action", ["host.restart_service", "host.stop_service", "host.start_service"]
)
def test_an_unknown_service_is_a_clear_failure(systemctl, action):
    systemctl(exit_code=5)  # systemctl's answer for a unit that does not exist

    outcome, sink = run(action, {"service_name": "nosuch"})

    assert outcome.exit_code == 1
    assert outcome.error == f"systemctl {VERBS[action]} nosuch failed: unknown service nosuch"
    assert outcome.error in sink.stderr
    assert outcome.details["systemctl_exit_code"] == 5


def test_status_of_an_unknown_service_is_a_clear_failure(systemctl):
    systemctl(exit_code=4)

    outcome, _ = run("host.service_status", {"service_name": "nosuch"})

    assert outcome.exit_code == 1
    assert outcome.error == "systemctl status nosuch failed: unknown service nosuch"


@pytest.mark.parametrize(("code", "active"), [(0, True), (3, False)])
def test_status_reports_whether_the_service_runs(systemctl, code, active):
    systemctl(exit_code=code)

    outcome, sink = run("host.service_status", {"service_name": "nginx"})

    assert outcome.success
    assert outcome.details["active"] is active
    assert outcome.details["systemctl_exit_code"] == code
    assert "unit says hello" in sink.stdout


def test_a_failing_systemctl_reports_its_exit_code(systemctl):
    systemctl(exit_code=1)

    outcome, _ = run("host.stop_service", {"service_name": "nginx"})

    assert outcome.exit_code == 1
    assert outcome.error == "systemctl stop nginx failed: exit code 1"


def test_a_missing_systemctl_is_a_clear_failure(settings, tmp_path):
    settings.HOST_ACTIONS_SYSTEMCTL = str(tmp_path / "no-systemctl")

    outcome, _ = run("host.start_service", {"service_name": "nginx"})

    assert outcome.exit_code == 1
    assert outcome.error == f"command not found: {tmp_path / 'no-systemctl'}"


@pytest.mark.parametrize(
    "name",
    [
        "",
        "-H",
        "--help",
        "a;touch {marker}",
        "$(touch {marker})",
        "`touch {marker}`",
        "a && touch {marker}",
        "a|b",
        "a b",
        "nginx\n",
        " nginx",
        "a/b",
        "a\x00b",
        "x" * 256,
    ],
)
@pytest.mark.parametrize("action", sorted(VERBS))
def test_service_names_with_shell_or_option_syntax_are_refused(systemctl, tmp_path, action, name):
    _, calls = systemctl(exit_code=0)
    marker = tmp_path / "pwned"

    with pytest.raises(serializers.ValidationError) as excinfo:
        run(action, {"service_name": name.format(marker=marker)})

    assert "service_name" in excinfo.value.detail
    assert calls() == []
    assert not marker.exists()


@pytest.mark.parametrize("name", ["nginx", "getty@tty1.service", "my-app_2.service", "x" * 255])
def test_valid_service_names_are_accepted(name, settings):
    assert get_action("host.stop_service").validate({"service_name": name}) == {
        "service_name": name,
        "host": settings.HOST_ACTIONS_DEFAULT_HOST,
    }


# --- kill_process against real processes ------------------------------------------


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator:
    """Start ``sleep`` under a unique name (so name lookups only ever find ours)."""
    started: list[subprocess.Popen] = []

    def start(name: str | None = None, count: int = 1) -> tuple[str, list[subprocess.Popen]]:
        name = name or f"alk{uuid.uuid4().hex[:10]}"
        binary = tmp_path / name
        if not binary.exists():
            shutil.copy(shutil.which("sleep"), binary)
        procs = [subprocess.Popen([str(binary), "300"]) for _ in range(count)]
        started.extend(procs)
        for proc in procs:
            assert wait_until(lambda p=proc: _comm(p.pid) == name[:15])
        return name, procs

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL", "SIGHUP", "SIGINT"])
def test_kill_by_pid_sends_the_chosen_signal(spawn, signal_name):
    name, (proc,) = spawn()

    outcome, sink = run("host.kill_process", {"target": str(proc.pid), "signal": signal_name})

    assert outcome.success, sink.stderr
    assert proc.wait(timeout=5) == -getattr(signal, signal_name)
    assert sink.stdout == f"sent {signal_name} to {proc.pid} ({name})\n"
    assert outcome.details["signalled"] == [{"pid": proc.pid, "comm": name}]


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL", "SIGHUP", "SIGINT"])
def test_kill_by_name_signals_every_process_of_that_name(spawn, signal_name):
    name, procs = spawn(count=2)
    bystander_name, (bystander,) = spawn()

    outcome, sink = run("host.kill_process", {"target": name, "signal": signal_name})

    assert outcome.success, sink.stderr
    for proc in procs:
        assert proc.wait(timeout=5) == -getattr(signal, signal_name)
    assert sorted(v["pid"] for v in outcome.details["signalled"]) == sorted(p.pid for p in procs)
    assert bystander.poll() is None
    for proc in procs:
        assert f"sent {signal_name} to {proc.pid} ({name})" in sink.stdout


def test_kill_defaults_to_sigterm_and_accepts_an_integer_pid(spawn):
    _, (proc,) = spawn()

    outcome, _ = run("host.kill_process", {"target": proc.pid})

    assert outcome.success
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert outcome.details["signal"] == "SIGTERM"


def test_kill_by_name_matches_comm_exactly(spawn):
    name, (proc,) = spawn()

    outcome, _ = run("host.kill_process", {"target": name[:-1]})

    assert outcome.exit_code == 1
    assert outcome.error == f"no process named {name[:-1]}"
    assert proc.poll() is None


def test_kill_by_a_name_longer_than_comm_uses_argv0(spawn):
    name, (proc,) = spawn(name=f"airlock-test-sleeper-{uuid.uuid4().hex[:8]}")

    outcome, _ = run("host.kill_process", {"target": name})

    assert outcome.success
    assert proc.wait(timeout=5) == -signal.SIGTERM
    # Same 15-byte comm, different full name: not a match.
    outcome, _ = run("host.kill_process", {"target": name[:15] + "-other"})
    assert outcome.error == f"no process named {name[:15]}-other"


def test_an_unreaped_zombie_counts_as_exited(spawn):
    name, (proc,) = spawn()
    proc.send_signal(signal.SIGKILL)
    assert wait_until(lambda: not alive(proc.pid))  # a zombie until proc.wait()

    by_pid, _ = run("host.kill_process", {"target": str(proc.pid)})
    by_name, _ = run("host.kill_process", {"target": name})

    assert by_pid.error == f"no such process: {proc.pid}"
    assert by_name.error == f"no process named {name}"


def test_an_exited_pid_is_a_clear_failure():
    proc = subprocess.Popen(["true"])
    proc.wait()

    outcome, sink = run("host.kill_process", {"target": str(proc.pid)})

    assert outcome.exit_code == 1
    assert outcome.error == f"no such process: {proc.pid}"
    assert outcome.error in sink.stderr


@pytest.mark.parametrize("target", ["1", 1, "0", "-1", "01"])
def test_pid_1_and_non_positive_pids_are_refused(target):
    with pytest.raises(serializers.ValidationError) as excinfo:
        get_action("host.kill_process").validate({"target": target})
    assert "target" in excinfo.value.detail


def test_the_runner_refuses_pid_1_even_without_validation():
    outcome = get_action("host.kill_process").runner(
        {"target": 1}, ActionContext(sink=MemorySink())
    )

    assert outcome.exit_code == 1
    assert "pid 1" in outcome.error


@pytest.mark.parametrize("which", ["itself", "its parent"])
def test_the_worker_and_its_ancestors_are_never_signalled(which):
    pid = os.getpid() if which == "itself" else os.getppid()

    outcome, _ = run("host.kill_process", {"target": str(pid), "signal": "SIGKILL"})

    assert outcome.exit_code == 1
    assert outcome.error.startswith(f"refusing to signal pid {pid}")
    assert pid in protected_pids()


@pytest.mark.parametrize(
    "target",
    ["", "-9", "--all", "a;b", "$(id)", "sleep 1", "a/b", "a\nb", "*", "x" * 256, "99999999", True],
)
def test_invalid_targets_are_refused(target):
    with pytest.raises(serializers.ValidationError):
        get_action("host.kill_process").validate({"target": target})


@pytest.mark.parametrize("signal_name", ["SIGSTOP", "SIGUSR1", "9", "sigterm", "TERM", ""])
def test_only_the_four_signals_are_allowed(signal_name):
    with pytest.raises(serializers.ValidationError) as excinfo:
        get_action("host.kill_process").validate({"target": "nginx", "signal": signal_name})
    assert "signal" in excinfo.value.detail


# --- host.exec ----------------------------------------------------------------------


def test_exec_involves_no_shell():
    outcome, sink = run("host.exec", {"command": "echo $HOME; id"})

    assert outcome.success
    assert sink.stdout == "$HOME; id\n"
    assert outcome.details["argv"] == ["echo", "$HOME;", "id"]


def test_exec_splits_with_shell_quoting_rules():
    outcome, sink = run("host.exec", {"command": "echo 'a  b' \"c|d\" e\\ f"})

    assert outcome.success
    assert sink.stdout == "a  b c|d e f\n"


def test_exec_hides_the_workers_environment(monkeypatch):
    monkeypatch.setenv("AIRLOCK_TEST_SECRET", "hunter2")

    outcome, sink = run("host.exec", {"command": "env"})

    assert outcome.success
    assert "hunter2" not in sink.stdout
    assert f"PATH={SAFE_PATH}" in sink.stdout.splitlines()


def test_exec_reports_the_commands_exit_code():
    outcome, sink = run("host.exec", {"command": f"{sys.executable} -c 'raise SystemExit(3)'"})

    assert outcome.exit_code == 3
    assert outcome.error is None
    assert not outcome.success


def test_exec_of_a_missing_program_is_a_clear_failure():
    outcome, sink = run("host.exec", {"command": "airlock-no-such-program --flag"})

    assert outcome.exit_code == 1
    assert outcome.error == "command not found: airlock-no-such-program"
    assert outcome.error in sink.stderr


PRODUCER = textwrap.dedent(
    """\
    import sys, time
    print("one", flush=True)
    time.sleep(0.4)
    print("two", file=sys.stderr, flush=True)
    time.sleep(0.4)
    print("three", flush=True)
    """
)


def test_exec_streams_output_in_order_as_it_is_produced():
    sink = TimedSink()

    outcome, _ = run("host.exec", {"command": f"{sys.executable} -c '{PRODUCER}'"}, sink)

    assert outcome.success
    assert [(stream, text) for _, stream, text in sink.arrivals] == [
        ("stdout", "one\n"),
        ("stderr", "two\n"),
        ("stdout", "three\n"),
    ]
    first, second, third = (at for at, _, _ in sink.arrivals)
    # Each chunk arrived when it was written (0.4 s apart), not all at the end.
    assert second - first > 0.2
    assert third - first > 0.5


def test_exec_output_beyond_the_cap_is_cut_without_stalling():
    sink = MemorySink(cap_bytes=1024)

    outcome, _ = run(
        "host.exec",
        {"command": "head -c 20000000 /dev/zero"},
        sink,
        limits=Limits(timeout_seconds=20),
    )

    assert outcome.success
    assert sink.truncated
    assert sink.kept_bytes == 1024
    assert sink.dropped_bytes == 20_000_000 - 1024


SPAWNER = textwrap.dedent(
    """\
    import subprocess, sys, time
    child = subprocess.Popen(["sleep", "300"])
    escaped = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(sys.argv[1], "w") as f:
        f.write(f"{child.pid} {escaped.pid}")
    print("started", flush=True)
    time.sleep(300)
    """
)


def _spawner(tmp_path: Path) -> tuple[str, Path]:
    script, pids = tmp_path / "spawner.py", tmp_path / "pids"
    script.write_text(SPAWNER)
    return f"{sys.executable} {script} {pids}", pids


def _read_pids(path: Path) -> list[int]:
    assert wait_until(lambda: path.exists() and path.read_text().strip())
    return [int(pid) for pid in path.read_text().split()]


def test_exec_timeout_kills_the_command_and_its_children(tmp_path):
    command, pids = _spawner(tmp_path)
    began = time.monotonic()

    outcome, sink = run("host.exec", {"command": command}, limits=Limits(timeout_seconds=1.5))

    assert outcome.timed_out
    assert not outcome.success
    assert 1.5 <= time.monotonic() - began < 4
    assert sink.stdout == "started\n"
    children = _read_pids(pids)
    assert len(children) == 2
    assert wait_until(lambda: not any(alive(pid) for pid in [*children, outcome.details["pid"]]))


def test_exec_cancel_kills_the_command_and_its_children(tmp_path):
    command, pids = _spawner(tmp_path)
    cancel = threading.Event()
    result: dict = {}

    def carry_out() -> None:
        result["outcome"], _ = run("host.exec", {"command": command}, cancel=cancel)

    worker = threading.Thread(target=carry_out)
    worker.start()
    children = _read_pids(pids)
    cancel.set()
    worker.join(timeout=5)

    assert not worker.is_alive()
    assert result["outcome"].cancelled
    assert wait_until(lambda: not any(alive(pid) for pid in children))


def test_exec_does_not_wait_for_a_leftover_child_holding_its_output(tmp_path):
    # The command exits at once but leaves a child holding its stdout open.
    leaver = "import subprocess; subprocess.Popen(['sleep', '300']); print('bye', flush=True)"
    began = time.monotonic()

    outcome, sink = run("host.exec", {"command": f'{sys.executable} -c "{leaver}"'})

    assert outcome.success
    assert sink.stdout == "bye\n"
    assert time.monotonic() - began < 5


@pytest.mark.parametrize(
    "command",
    ["", "   ", "\n", "echo a\x00b", "x" * 4097, "echo 'unbalanced", 'echo "open', "echo \\"],
)
def test_invalid_commands_are_refused(command):
    with pytest.raises(serializers.ValidationError) as excinfo:
        get_action("host.exec").validate({"command": command})
    assert "command" in excinfo.value.detail


def test_a_long_command_up_to_the_limit_is_accepted(settings):
    command = "echo " + "x" * 4091
    assert get_action("host.exec").validate({"command": command}) == {
        "command": command,
        "host": settings.HOST_ACTIONS_DEFAULT_HOST,
    }


# --- the catalog --------------------------------------------------------------------


def test_host_actions_are_host_bound_with_their_policy_targets():
    expected = {
        "host.restart_service": {"service": "service_name", "host": "host"},
        "host.stop_service": {"service": "service_name", "host": "host"},
        "host.start_service": {"service": "service_name", "host": "host"},
        "host.service_status": {"service": "service_name", "host": "host"},
        "host.kill_process": {"process": "target", "host": "host"},
        "host.exec": {"command": "command", "host": "host"},
    }
    risks = {
        "host.service_status": 1,
        "host.start_service": 3,
        "host.restart_service": 4,
        "host.stop_service": 5,
        "host.kill_process": 6,
        "host.exec": 6,
    }
    for name, targets in expected.items():
        spec = get_action(name)
        assert spec.base_risk == risks[name]
        assert spec.host_bound
        assert spec.targets == targets
        assert spec.read_only == (name == "host.service_status")
    assert get_action("host.exec").target_values({"command": "uptime", "host": "db-1"}) == {
        "command": "uptime",
        "host": "db-1",
    }
