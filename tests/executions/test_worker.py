"""A separate Celery worker process: the real broker (filesystem or Redis), the real database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from approvals.core.services import submit
from executions import services, targets
from executions.models import Execution, SandboxSession
from tests import support
from tests.executions.conftest import ACTIVE

ROOT = Path(__file__).resolve().parents[2]


def worker_env(extra: dict | None = None) -> dict:
    env = {**os.environ, **(extra or {})}
    database = django_settings.DATABASES["default"]
    if connection.vendor == "sqlite":
        env["SQLITE_PATH"] = str(database["NAME"])
    else:
        env["DATABASE_URL"] = (
            f"postgres://{database['USER']}:{database.get('PASSWORD') or ''}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        )
    env["WORKER_HEARTBEAT_SECONDS"] = "1"
    return env


class Worker:
    def __init__(self, log_path: Path, queue: str, env: dict | None = None):
        self.log_path = log_path
        self.queue = queue
        self.env = env
        # Its own host name too, so host-bound work (sessions) stays in this test.
        self.hostname = f"test-{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "console",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "2",
            "-Q",
            f"{self.queue},host.{self.hostname}",
            "-n",
            f"test-{uuid.uuid4().hex[:8]}@%h",
            "--without-gossip",
            "--without-mingle",
            "--loglevel",
            "INFO",
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=worker_env({"WORKER_HOSTNAME": self.hostname, **(self.env or {})}),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> None:
        """Until the worker consumes (Celery logs "ready."): a loaded machine may take longer
        to start one than a request waits for a session to open."""
        deadline = time.monotonic() + timeout
        while " ready." not in self.log():
            assert self.process.poll() is None, self.log()[-3000:]
            assert time.monotonic() < deadline, self.log()[-3000:]
            time.sleep(0.1)


@pytest.fixture
def worker(transactional_db, scripts_allowed, tmp_path, settings):
    # A queue of its own: no message of another test (or another test process)
    # reaches this worker, and none of this test's reaches theirs.
    settings.CELERY_TASK_DEFAULT_QUEUE = f"airlock-test-{uuid.uuid4().hex[:12]}"
    started = Worker(tmp_path / "worker.log", settings.CELERY_TASK_DEFAULT_QUEUE)
    started.start()
    yield started
    started.kill()


def wait_for(predicate, timeout: float, worker: Worker, what: str):
    return support.wait_for(
        predicate, timeout, lambda: f"({what}); worker log:\n{worker.log()[-3000:]}"
    )


def propose(agent, code: str):
    return submit(
        agent, {"action": "script.execute", "parameters": {"language": "python", "code": code}}
    ).proposal


def execute_in_session(
    api, worker: Worker, session_id: int, code: str, also: Worker | None = None
) -> Execution:
    """Propose an execute in a session through the API; wait until a worker finished it."""
    proposal = api.post(
        f"/api/v1/sandboxes/{session_id}/execute", {"code": code}, format="json"
    ).json()
    assert proposal["status"] == "approved", proposal
    other_log = f"; other worker log:\n{also.log()[-2000:]}" if also else ""
    return wait_for(
        lambda: Execution.objects.filter(
            pk=proposal["execution_id"], status__in=["succeeded", "failed"]
        ).first(),
        60,
        worker,
        "the execute" + other_log,
    )


def test_an_approved_script_runs_on_a_separate_worker(worker, agent):
    proposal = propose(agent, 'print("hi")')
    assert proposal.status == "approved"
    execution = wait_for(
        lambda: Execution.objects.filter(pk=proposal.execution_id, status="succeeded").first(),
        60,
        worker,
        "the execution",
    )
    assert execution.output_text("stdout") == "hi\n"
    assert execution.worker_host
    assert execution.dispatch_count == 1


def test_a_worker_killed_mid_run_leaves_the_execution_lost_and_nothing_reruns_it(
    worker, agent, settings
):
    settings.WORKER_LOST_AFTER_SECONDS = 3
    marker = f"airlock-kill-{uuid.uuid4().hex}"
    proposal = propose(
        agent, f"import time\nprint('started {marker}', flush=True)\ntime.sleep(120)\n"
    )
    execution_id = proposal.execution_id
    # The whole line: print may write the text and its newline apart, and a kill
    # loses what the recorder had not flushed yet (documented: the last moment).
    wait_for(
        lambda: (
            Execution.objects.get(pk=execution_id).output_text("stdout") == f"started {marker}\n"
        ),
        60,
        worker,
        "output",
    )
    worker.kill()

    time.sleep(settings.WORKER_LOST_AFTER_SECONDS + 1.5)
    assert services.sweep()["lost"] == 1
    assert Execution.objects.get(pk=execution_id).status == "lost"

    worker.start()  # a fresh worker, and the sweeper again: still nothing re-runs it
    time.sleep(4)
    assert services.sweep() == {"requeued": 0, "lost": 0}
    execution = Execution.objects.get(pk=execution_id)
    assert execution.status == "lost"
    assert execution.output_text("stdout") == f"started {marker}\n"
    assert execution.dispatch_count == 1


def test_a_session_opened_and_used_through_a_separate_worker(worker, agent_and_token, settings):
    from tests.conftest import client_for

    worker.kill()
    worker.env = {"SANDBOX_BACKEND": "local"}  # the backend that offers sessions everywhere
    worker.start()
    worker.wait_ready()
    api = client_for(agent_and_token[1])
    created = api.post("/api/v1/sandboxes", {"language": "python"}, format="json").json()
    assert created["status"] == "active", (created, worker.log()[-3000:])

    assert execute_in_session(api, worker, created["id"], "x = 41").status == "succeeded"
    result = execute_in_session(api, worker, created["id"], "print(x + 1)")
    assert (result.status, result.output_text("stdout")) == ("succeeded", "42\n")
    assert result.queue == f"session.{created['worker_host']}"


def test_sessions_reach_their_own_process_among_workers_of_one_host(
    worker, agent_and_token, settings, tmp_path
):
    """Two worker processes share a host queue; each session's executes reach the one holding it.

    Then the holder dies: its session closes as orphaned and an execute stranded
    in its queue fails clearly on the other worker instead of waiting forever.
    """
    from tests.conftest import client_for

    worker.kill()
    worker.env = {"SANDBOX_BACKEND": "local"}
    other = Worker(tmp_path / "other.log", worker.queue, env=worker.env)
    other.hostname = worker.hostname  # the same host: one host queue, two processes
    worker.start()
    other.start()
    api = client_for(agent_and_token[1])
    try:
        sessions = []
        for _ in range(4):  # whichever worker takes the open, the session lives there
            body = api.post("/api/v1/sandboxes", {"language": "python"}, format="json").json()
            assert body["status"] == "active", (body, worker.log()[-2000:], other.log()[-2000:])
            sessions.append(body)

        def execute(session_id: int, code: str) -> Execution:
            return execute_in_session(api, worker, session_id, code, also=other)

        for n, session in enumerate(sessions):
            assert execute(session["id"], f"x = {n}").status == "succeeded"
        for _ in range(3):
            for session in sessions:
                result = execute(session["id"], "x += 10; print(x)")
                assert result.status == "succeeded", result.output_text("stderr")
        for n, session in enumerate(sessions):
            result = execute(session["id"], "print(x)")
            assert result.output_text("stdout") == f"{n + 30}\n"

        # The holder of the first session dies; an execute waits in its queue.
        holder_pid = int(sessions[0]["worker_host"].split(".")[-2])
        dead, survivor = (worker, other) if worker.process.pid == holder_pid else (other, worker)
        assert dead.process.pid == holder_pid
        dead.kill()
        stranded = api.post(
            f"/api/v1/sandboxes/{sessions[0]['id']}/execute", {"code": "print(x)"}, format="json"
        ).json()
        time.sleep(1)
        assert Execution.objects.get(pk=stranded["execution_id"]).status == "queued"

        # No sign of life from it for the timeout: the sweeper closes its sessions.
        SandboxSession.objects.filter(worker_host=sessions[0]["worker_host"]).update(
            worker_seen_at=timezone.now() - timedelta(hours=1)
        )
        services.sweep()
        closed = SandboxSession.objects.get(pk=sessions[0]["id"])
        assert closed.status == "closed"
        assert "its worker stopped" in closed.closed_reason
        failed = wait_for(
            lambda: Execution.objects.filter(pk=stranded["execution_id"], status="failed").first(),
            60,
            survivor,
            "the stranded execute",
        )
        assert "not active" in failed.error
    finally:
        other.kill()


@pytest.mark.redis
@pytest.mark.skipif(
    not django_settings.REDIS_URL, reason="another host's worker is asked through Redis (pass 2)"
)
def test_a_service_on_another_host_is_read_by_that_hosts_worker_while_the_page_waits(
    transactional_db, tmp_path, settings, systemctl
):
    settings.CELERY_TASK_DEFAULT_QUEUE = f"airlock-test-{uuid.uuid4().hex[:12]}"
    calls = systemctl(ACTIVE)
    # Only the other host's worker has the stand-in: an answer read here would be "unknown".
    other = Worker(
        tmp_path / "worker.log",
        settings.CELERY_TASK_DEFAULT_QUEUE,
        env={"HOST_ACTIONS_SYSTEMCTL": settings.HOST_ACTIONS_SYSTEMCTL},
    )
    settings.HOST_ACTIONS_SYSTEMCTL = "/bin/false"
    other.start()
    try:
        other.wait_ready()
        parameters = {"service_name": "redis", "host": other.hostname}
        state = support.wait_for(
            lambda: (s := targets.read("host.restart_service", parameters)).known and s,
            30,
            lambda: other.log()[-3000:],
        )
    finally:
        other.kill()
    assert (state.kind, state.name, state.status) == (
        "service",
        f"redis on {other.hostname}",
        "active",
    )
    assert {f.label: f.text for f in state.facts} == {
        "State": "active (running)",
        "Since": "Thu 2026-11-26 09:12:44 UTC",
        "Restarts": "2",
        "Main PID": "4242",
        "Enabled": "enabled",
        "Description": "A high performance web server = and a reverse proxy",
    }
    assert calls() and all(argv[-1] == "redis" for argv in calls())


@pytest.mark.redis
@pytest.mark.skipif(
    not django_settings.REDIS_URL, reason="another host's worker is asked through Redis (pass 2)"
)
def test_a_host_whose_worker_is_away_reads_as_unknown_within_the_second(settings):
    began = time.monotonic()
    state = targets.read("host.restart_service", {"service_name": "redis", "host": "nobody-here"})
    assert time.monotonic() - began < 5  # a second's wait, and a loaded machine's slack
    assert state.status == "unknown"
    assert state.why == "no answer within 1 s"
