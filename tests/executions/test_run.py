"""Carrying out executions in-process: result contract, output, cancel, timeout, sweeper."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.core.services import submit
from approvals.models import Proposal
from executions import services
from executions.models import Execution, OutputChunk
from tests.conftest import client_for
from tests.support import wait_for


def approved_script(agent, code: str, language: str = "python", **params) -> Execution:
    submission = submit(
        agent,
        {"action": "script.execute", "parameters": {"language": language, "code": code, **params}},
    )
    proposal = submission.proposal
    assert proposal.status == "approved", proposal.decision_path
    return proposal.execution


def run_in_thread(execution_id: int) -> threading.Thread:
    thread = threading.Thread(target=services.run, args=[execution_id])
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_print_hi_succeeds_with_the_result_contract(agent_and_token):
    agent, token = agent_and_token
    execution = approved_script(agent, 'print("hi")')
    services.run(execution.pk)
    body = client_for(token).get(f"/api/v1/executions/{execution.pk}").json()
    assert body["status"] == "succeeded"
    assert body["success"] is True
    assert body["stdout"] == "hi\n"
    assert body["stderr"] == ""
    assert body["exit_code"] == 0
    assert body["timed_out"] is False and body["truncated"] is False
    assert body["duration_ms"] >= 0
    assert body["backend"] in ("local", "docker", "gvisor")
    canonical = json.dumps(
        {"action": "script.execute", "parameters": execution.parameters},
        sort_keys=True,
        separators=(",", ":"),
    )
    provenance = body["provenance"]
    assert provenance["command_hash"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert provenance["capabilities_used"] == ["*"]
    assert provenance["worker_host"]
    assert provenance["limits"]["timeout_seconds"] == 30
    assert provenance["timestamps"]["started_at"] and provenance["timestamps"]["finished_at"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_running_twice_runs_once(agent):
    execution = approved_script(agent, "print('once')")
    services.run(execution.pk)
    assert services.run(execution.pk) is None
    assert Execution.objects.get(pk=execution.pk).output_text("stdout") == "once\n"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_output_is_persisted_in_order_while_the_script_runs(agent):
    code = "import time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.3)\n"
    execution = approved_script(agent, code)
    thread = run_in_thread(execution.pk)
    # The first line is stored long before the script ends.
    wait_for(lambda: OutputChunk.objects.filter(execution=execution).exists(), timeout=5)
    assert Execution.objects.get(pk=execution.pk).status == "running"
    thread.join()
    chunks = list(OutputChunk.objects.filter(execution=execution).order_by("seq"))
    assert [c.seq for c in chunks] == list(range(1, len(chunks) + 1))
    assert "".join(c.data for c in chunks) == "0\n1\n2\n3\n4\n"
    assert len(chunks) > 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_a_failing_script_fails_with_its_exit_code_and_stderr(agent):
    execution = approved_script(agent, "import sys\nsys.stderr.write('boom\\n')\nsys.exit(3)")
    services.run(execution.pk)
    execution.refresh_from_db()
    assert execution.status == "failed"
    assert execution.exit_code == 3
    assert execution.output_text("stderr") == "boom\n"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_a_script_past_its_timeout_is_timed_out(agent):
    execution = approved_script(
        agent, "import time\nprint('start', flush=True)\ntime.sleep(60)", timeout_seconds=1
    )
    started = time.monotonic()
    services.run(execution.pk)
    execution.refresh_from_db()
    assert execution.status == "timed_out"
    assert execution.timed_out is True
    assert time.monotonic() - started < 10
    assert execution.output_text("stdout") == "start\n"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_output_past_the_cap_is_cut_and_flagged(agent, settings):
    settings.OUTPUT_CAP_BYTES = 4096
    execution = approved_script(agent, "print('x' * 100000)")
    services.run(execution.pk)
    execution.refresh_from_db()
    assert execution.truncated is True
    assert len(execution.output_text("stdout")) == 4096
    assert execution.status == "succeeded"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_the_script_sees_none_of_the_workers_environment(agent, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "worker-secret-123")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/airlock")
    monkeypatch.setenv("REDIS_URL", "redis://secret@redis:6379/0")
    code = "import os, json\nprint(json.dumps(dict(os.environ)))"
    execution = approved_script(agent, code)
    services.run(execution.pk)
    environment = json.loads(Execution.objects.get(pk=execution.pk).output_text("stdout"))
    assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"} & set(
        environment
    )
    assert "worker-secret-123" not in json.dumps(environment)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_a_child_in_its_own_session_is_killed_at_timeout(agent, tmp_path):
    marker = f"airlock-orphan-{time.monotonic_ns()}"
    code = (
        "import os, time, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', '300', '{marker}'])\n"
        "    os._exit(0)\n"
        "print('forked', flush=True)\n"
        "time.sleep(60)\n"
    )
    execution = approved_script(agent, code, timeout_seconds=2)
    services.run(execution.pk)
    assert Execution.objects.get(pk=execution.pk).status == "timed_out"
    time.sleep(0.3)
    assert not _processes_with(marker), "a forked child survived the timeout"


def _processes_with(marker: str) -> list[int]:
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_cancel_of_a_queued_execution_cancels_it_at_once(agent, reviewer):
    execution = approved_script(agent, "print(1)")
    services.request_cancel(execution.pk, "user:rita")
    execution.refresh_from_db()
    assert execution.status == "cancelled"
    assert services.run(execution.pk) is None  # a late worker does not run it


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_cancel_of_a_running_execution_stops_it(agent_and_token, reviewer):
    agent, token = agent_and_token
    execution = approved_script(agent, "import time\nprint('go', flush=True)\ntime.sleep(60)")
    thread = run_in_thread(execution.pk)
    wait_for(lambda: Execution.objects.get(pk=execution.pk).status == "running")
    response = client_for(token).post(f"/api/v1/executions/{execution.pk}/cancel")
    assert response.status_code == 202
    started = time.monotonic()
    thread.join(timeout=15)
    assert time.monotonic() - started < 5
    execution.refresh_from_db()
    assert execution.status == "cancelled"
    again = client_for(token).post(f"/api/v1/executions/{execution.pk}/cancel")
    assert again.status_code == 409


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_one_heartbeat_thread_keeps_runs_alive_and_cancels_only_the_run_asked(agent, settings):
    settings.WORKER_HEARTBEAT_SECONDS = 1
    code = "import time\nprint('go', flush=True)\ntime.sleep(60)"
    first, second = approved_script(agent, code), approved_script(agent, code + "\n")
    threads = [run_in_thread(first.pk), run_in_thread(second.pk)]

    def beats() -> dict:
        return dict(
            Execution.objects.filter(pk__in=[first.pk, second.pk], status="running").values_list(
                "pk", "heartbeat_at"
            )
        )

    wait_for(lambda: len(beats()) == 2)
    claimed = beats()
    wait_for(lambda: all(beats().get(pk, at) > at for pk, at in claimed.items()), 10)
    names = [thread.name for thread in threading.enumerate()]
    assert names.count("heartbeats") == 1, names

    services.request_cancel(first.pk, "user:test")
    threads[0].join(timeout=10)
    assert not threads[0].is_alive()
    assert Execution.objects.get(pk=first.pk).status == "cancelled"
    beat = beats()[second.pk]  # the other run goes on, and is still marked alive
    wait_for(lambda: beats()[second.pk] > beat, 10)

    services.request_cancel(second.pk, "user:test")
    threads[1].join(timeout=10)
    assert Execution.objects.get(pk=second.pk).status == "cancelled"
    assert not services._heartbeats._watched()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_the_sweeper_redispatches_stale_queued_executions(agent, settings, monkeypatch):
    sent = []
    monkeypatch.setattr(
        "executions.tasks.run_execution.apply_async", lambda args, queue: sent.append((args, queue))
    )
    execution = approved_script(agent, "print(1)")
    long_ago = timezone.now() - timedelta(seconds=settings.REQUEUE_AFTER_SECONDS + 5)
    Execution.objects.filter(pk=execution.pk).update(created_at=long_ago, dispatched_at=long_ago)
    assert services.sweep() == {"requeued": 1, "lost": 0}
    # Once on commit of the approval, once more by the sweeper.
    assert sent == [([execution.pk], "airlock")] * 2
    assert Execution.objects.get(pk=execution.pk).dispatch_count == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_a_running_execution_without_heartbeat_becomes_lost_and_is_not_rerun(agent, settings):
    execution = approved_script(agent, "print(1)")
    assert services.claim(execution.pk, "dead-host")
    stale = timezone.now() - timedelta(seconds=settings.WORKER_LOST_AFTER_SECONDS + 1)
    Execution.objects.filter(pk=execution.pk).update(heartbeat_at=stale)
    assert services.sweep()["lost"] == 1
    assert services.run(execution.pk) is None
    assert services.sweep() == {"requeued": 0, "lost": 0}
    execution.refresh_from_db()
    assert execution.status == "lost"
    assert not execution.chunks.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_output_after_seq_pages_through_chunks(agent_and_token):
    agent, token = agent_and_token
    code = "import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.2)\n"
    execution = approved_script(agent, code)
    services.run(execution.pk)
    api = client_for(token)
    everything = api.get(f"/api/v1/executions/{execution.pk}/output").json()
    assert everything["terminal"] is True
    seqs = [c["seq"] for c in everything["chunks"]]
    later = api.get(f"/api/v1/executions/{execution.pk}/output?after={seqs[0]}").json()
    assert [c["seq"] for c in later["chunks"]] == seqs[1:]
    assert api.get(f"/api/v1/executions/{execution.pk}/output?after=-3").status_code == 400
    assert api.get(f"/api/v1/executions/{execution.pk}/output?after=x").status_code == 400


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_executions_are_visible_to_their_agent_and_reviewers_only(
    agent, reviewer_api, outsider_api, make_agent
):
    execution = approved_script(agent, "print(1)")
    _, other = make_agent("other", ["*"])
    assert reviewer_api.get(f"/api/v1/executions/{execution.pk}").status_code == 200
    assert client_for(other).get(f"/api/v1/executions/{execution.pk}").status_code == 404
    assert outsider_api.get(f"/api/v1/executions/{execution.pk}").status_code == 403
    assert client_for().get(f"/api/v1/executions/{execution.pk}").status_code == 401
    assert Proposal.objects.get(execution=execution).agent == agent


def result_contract(execution: Execution) -> dict:
    """MISSION §4's result of a stored execution, field by field, as JSON has it."""

    def when(moment):
        return moment.isoformat().replace("+00:00", "Z") if moment else None

    chunks = list(execution.chunks.order_by("seq"))
    duration = (
        int((execution.finished_at - execution.started_at).total_seconds() * 1000)
        if execution.started_at and execution.finished_at
        else None
    )
    return {
        "id": execution.pk,
        "proposal_id": Proposal.objects.get(execution=execution).pk,
        "action": execution.action,
        "status": execution.status,
        "success": execution.status == "succeeded",
        "stdout": "".join(chunk.data for chunk in chunks if chunk.stream == "stdout"),
        "stderr": "".join(chunk.data for chunk in chunks if chunk.stream == "stderr"),
        "exit_code": execution.exit_code,
        "duration_ms": duration,
        "timed_out": execution.timed_out,
        "truncated": execution.truncated,
        "backend": execution.backend,
        "error": execution.error,
        "last_seq": execution.last_seq,
        "report_by": when(execution.report_by),  # only for a call the agent carries out
        "provenance": {
            "command_hash": execution.command_hash,
            "capabilities_used": execution.capabilities_used,
            "worker_host": execution.worker_host,
            "backend": execution.backend,
            "image": execution.details.get("image"),
            "details": execution.details,
            "limits": execution.limits,
            "queue": execution.queue,
            "requested_by": execution.requested_by,
            "timestamps": {
                "queued_at": when(execution.created_at),
                "started_at": when(execution.started_at),
                "finished_at": when(execution.finished_at),
            },
        },
        "created_at": when(execution.created_at),
        "started_at": when(execution.started_at),
        "finished_at": when(execution.finished_at),
        "output_archived_at": when(execution.output_archived_at),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_the_result_read_answers_the_contract_of_the_stored_run(agent_and_token, reviewer_api):
    agent, token = agent_and_token
    api = client_for(token)
    ran = approved_script(  # stdout and stderr interleaved, a non-zero exit
        agent, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"
    )
    services.run(ran.pk)
    cancelled = approved_script(agent, "print(2)")
    services.request_cancel(cancelled.pk, "user:test")
    queued = approved_script(agent, "print(3)")
    for execution in (ran, cancelled, queued):
        expected = result_contract(Execution.objects.get(pk=execution.pk))
        assert api.get(f"/api/v1/executions/{execution.pk}").json() == expected
        assert reviewer_api.get(f"/api/v1/executions/{execution.pk}").json() == expected
    body = api.get(f"/api/v1/executions/{ran.pk}").json()
    assert (body["stdout"], body["stderr"], body["exit_code"]) == ("out\n", "err\n", 3)
    assert body["proposal_id"] == Proposal.objects.get(execution=ran).pk
    assert api.get("/api/v1/executions/999999").json()["error"]["message"] == (
        "execution 999999 does not exist or is not visible to you"
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
def test_a_result_and_its_output_take_the_same_queries_however_long_the_output(
    agent_and_token, django_assert_num_queries
):
    agent, token = agent_and_token
    api = client_for(token)
    short = approved_script(agent, "print(1)")
    long = approved_script(  # pauses longer than the recorder's batching: several chunks
        agent, "import time\nfor i in range(6):\n    print(i, flush=True)\n    time.sleep(0.12)"
    )
    for execution in (short, long):
        services.run(execution.pk)
    assert OutputChunk.objects.filter(execution=long).count() > 1
    api.get(f"/api/v1/executions/{short.pk}")  # the token's last-seen time is written once a minute
    for execution in (short, long):
        with django_assert_num_queries(3):  # the token, the execution, its output
            assert api.get(f"/api/v1/executions/{execution.pk}").json()["status"] == "succeeded"
        with django_assert_num_queries(3):
            page = api.get(f"/api/v1/executions/{execution.pk}/output?after=0").json()
        assert page["terminal"] is True
