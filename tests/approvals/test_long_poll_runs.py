"""Long-poll across a run: a wait until decided or finished answers with one read.

Transactional, like ``test_long_poll``: the watcher reads what was committed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from django.db import connection

from approvals.agents import waiting
from approvals.core import services
from approvals.models import Proposal
from executions.broadcast import PROPOSALS_GROUP, broadcast
from tests.approvals.test_long_poll import later, no_linger, wind_down  # noqa: F401 (fixture)
from tests.approvals.test_proposals_api import PRINT_HI, RISKY, propose
from tests.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def start_execution(execution_id: int) -> None:
    """What a worker does first: claim the execution (queued → running)."""
    from executions import services as executions

    try:
        executions.claim(execution_id, "a-worker")
    finally:
        connection.close()


def end_execution(execution_id: int) -> None:
    """What a worker does last: finish the execution it claimed as succeeded."""
    from executions import services as executions
    from executions.models import Execution
    from executions.output import ExecutionRecorder
    from executions.sandboxes.base import RunOutcome

    try:
        recorder = ExecutionRecorder(execution_id, cap_bytes=1024)
        rest = recorder.stop()
        outcome = RunOutcome(exit_code=0, duration_ms=1, backend="local")
        executions.finish(Execution.objects.get(pk=execution_id), outcome, recorder, rest)
    finally:
        connection.close()


def counting_views(monkeypatch) -> list[int]:
    """The proposal reads of the API's view, one entry per run of it."""
    from approvals.agents import api

    runs = []
    real = api.proposal_data
    monkeypatch.setattr(api, "proposal_data", lambda user, pk: runs.append(pk) or real(user, pk))
    return runs


def waiting_across(
    agent_api, pk: int, runs: list[int], step, wait: float = 20
) -> tuple[int, object]:
    """Long-poll ``pk`` while ``step`` runs 0.5 s in: the view's runs before the step, the answer."""
    before = []
    stepper = later(0.5, lambda: before.append(len(runs)) or step())
    response = agent_api.get(f"/api/v1/proposals/{pk}?wait={wait}")
    stepper.join()
    return before[0], response


def asgi_call(app, token: str, method: str, path: str, body: dict | None = None):
    """A call to ``app`` as the agent of ``token``, under way: the task answers its response."""
    from channels.testing import HttpCommunicator

    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]
    content = b""
    if body is not None:
        content = json.dumps(body).encode()
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(content)).encode()),
        ]
    call = HttpCommunicator(app, method, path, body=content, headers=headers)
    return asyncio.create_task(call.get_response(timeout=30))


async def until(condition, timeout: float = 20) -> None:
    """Wait for ``condition()``; a call that never reached its view fails instead of hanging."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def answered(response: dict, status: int, agent_api, inline: bool = False) -> dict:
    """The proposal a call answered with ``status``: its length told right, and as read now;
    ``inline``: with its run's result (an answer to ``until=finished``)."""
    assert response["status"] == status, response["body"]
    assert int(dict(response["headers"])[b"Content-Length"]) == len(response["body"])
    proposal = json.loads(response["body"])
    result = proposal.pop("result", None)
    assert proposal == agent_api.get(f"/api/v1/proposals/{proposal['id']}").json()
    if inline or result is not None:
        assert_inline(result, proposal, agent_api)
    return proposal


def assert_inline(result: dict | None, proposal: dict, agent_api) -> None:
    """The run's result, inline in an answer to ``until=finished``: the execution as read."""
    assert result == {
        **agent_api.get(f"/api/v1/executions/{proposal['execution_id']}").json(),
        "output_truncated": False,
        "output_url": f"/api/v1/executions/{proposal['execution_id']}/output",
    }


def test_the_wait_that_sees_the_execution_end_answers_without_running_the_view_again(
    agent_and_token, agent_api, monkeypatch
):
    """An ended execution never changes again: the message that tells of it is the answer."""
    from infrastructure.handler import OneHopASGIHandler

    agent, token = agent_and_token
    proposal = services.submit(agent, PRINT_HI).proposal
    assert proposal.status == "approved" and proposal.execution_id
    start_execution(proposal.execution_id)
    runs = counting_views(monkeypatch)
    app = OneHopASGIHandler(threads=2)

    async def main():
        answer = asgi_call(app, token, "GET", f"/api/v1/proposals/{proposal.pk}?wait=20")
        await until(lambda: runs)
        await asyncio.sleep(0.5)  # waiting, having seen it running
        before_the_end = len(runs)
        await asyncio.to_thread(end_execution, proposal.execution_id)
        response = await answer
        await wind_down(waiting.watcher())
        return before_the_end, response

    before_the_end, response = asyncio.run(main())
    assert len(runs) == before_the_end  # the view ran before the wait, not after it
    body = answered(response, 200, agent_api)
    assert (body["id"], body["execution_status"]) == (proposal.pk, "succeeded")


@pytest.mark.parametrize(
    ("started", "step", "status"),
    [(True, end_execution, "succeeded"), (False, start_execution, "running")],
    ids=["ended", "started"],
)
def test_a_wait_on_a_thread_woken_by_the_execution_moving_on_answers_without_a_second_read(
    agent_api, monkeypatch, started, step, status
):
    """An execution only moves forward: the message that it started or ended is the answer."""
    _, body = propose(agent_api, PRINT_HI)
    if started:
        start_execution(body["execution_id"])
    runs = counting_views(monkeypatch)
    before_the_step, response = waiting_across(
        agent_api, body["id"], runs, lambda: step(body["execution_id"])
    )
    assert before_the_step >= 1 and len(runs) == before_the_step
    assert response.json()["execution_status"] == status
    assert response.json() == agent_api.get(f"/api/v1/proposals/{body['id']}").json()


def test_a_late_message_of_an_earlier_execution_status_is_read_again(agent_api, monkeypatch):
    """A message may be late: one that names a status the call has seen pass is only a hint."""
    _, body = propose(agent_api, PRINT_HI)
    start_execution(body["execution_id"])
    runs = counting_views(monkeypatch)
    late = {"type": "execution.changed", "execution_id": body["execution_id"], "status": "queued"}
    started = time.monotonic()
    before_the_message, response = waiting_across(
        agent_api, body["id"], runs, lambda: broadcast(PROPOSALS_GROUP, late), wait=2
    )
    assert time.monotonic() - started >= 1.9  # it waited on: nothing changed
    assert len(runs) > before_the_message >= 1  # the view read again after the wake
    assert response.json()["execution_status"] == "running"


def steps(*actions) -> threading.Thread:
    """Run ``actions`` 0.5 s apart, the first 0.5 s from now, on one thread."""

    def run():
        for action in actions:
            time.sleep(0.5)
            action()

    return later(0, run)


def test_a_wait_until_finished_answers_the_end_told_by_messages_with_one_read(
    agent_api, monkeypatch
):
    """Started, then ended: the call waits past the start and answers the end, the view run once."""
    _, body = propose(agent_api, PRINT_HI)
    execution_id = body["execution_id"]
    runs = counting_views(monkeypatch)
    started = time.monotonic()
    stepper = steps(lambda: start_execution(execution_id), lambda: end_execution(execution_id))
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=20&until=finished")
    elapsed = time.monotonic() - started
    stepper.join()
    assert 0.9 < elapsed < 10, elapsed  # it did not answer the start
    assert runs == [body["id"]]
    assert response.json()["execution_status"] == "succeeded"
    answer = response.json()
    result = answer.pop("result")
    assert answer == agent_api.get(f"/api/v1/proposals/{body['id']}").json()
    assert_inline(result, answer, agent_api)


def test_a_wait_until_finished_waits_past_a_reviewers_approval_for_the_run(agent_api, reviewer):
    _, body = propose(agent_api, RISKY)
    assert body["status"] == "pending"
    execution_ids = []

    def approve():
        services.decide(body["id"], reviewer, "approve", "ok")
        execution_ids.append(Proposal.objects.get(pk=body["id"]).execution_id)

    stepper = steps(
        approve,
        lambda: start_execution(execution_ids[0]),
        lambda: end_execution(execution_ids[0]),
    )
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=20&until=finished")
    stepper.join()
    assert response.json()["status"] == "approved"
    assert response.json()["execution_status"] == "succeeded"


def test_a_wait_until_decided_answers_the_approval_not_the_run(agent_api, reviewer):
    _, body = propose(agent_api, RISKY)
    decider = later(0.5, lambda: services.decide(body["id"], reviewer, "approve", "ok"))
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=20&until=decided")
    decider.join()
    assert response.json()["status"] == "approved"
    assert response.json()["execution_status"] == "queued"

    started = time.monotonic()  # decided already: at once, though the run is yet to come
    again = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=20&until=decided")
    assert time.monotonic() - started < 2
    assert again.json() == response.json()


def test_a_wait_until_finished_that_runs_out_answers_the_step_it_was_told(agent_api, monkeypatch):
    _, body = propose(agent_api, PRINT_HI)
    runs = counting_views(monkeypatch)
    started = time.monotonic()
    stepper = steps(lambda: start_execution(body["execution_id"]))
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=1.5&until=finished")
    stepper.join()
    assert time.monotonic() - started >= 1.4
    assert len(runs) == 1
    assert response.json()["execution_status"] == "running"
    assert response.json() == agent_api.get(f"/api/v1/proposals/{body['id']}").json()


def test_a_wait_until_finished_under_the_asgi_handler_is_one_read(
    agent_and_token, agent_api, monkeypatch
):
    from infrastructure.handler import OneHopASGIHandler

    agent, token = agent_and_token
    proposal = services.submit(agent, PRINT_HI).proposal
    runs = counting_views(monkeypatch)
    app = OneHopASGIHandler(threads=2)

    async def main():
        path = f"/api/v1/proposals/{proposal.pk}?wait=20&until=finished"
        answer = asgi_call(app, token, "GET", path)
        await until(lambda: runs)
        await asyncio.sleep(0.3)
        await asyncio.to_thread(start_execution, proposal.execution_id)
        await asyncio.sleep(0.3)
        assert not answer.done()  # a start is not the end
        await asyncio.to_thread(end_execution, proposal.execution_id)
        response = await answer
        await wind_down(waiting.watcher())
        return response

    response = asyncio.run(main())
    assert runs == [proposal.pk]
    body = answered(response, 200, agent_api, inline=True)
    assert (body["id"], body["execution_status"]) == (proposal.pk, "succeeded")


def test_a_proposal_made_with_wait_until_finished_answers_its_result_in_one_call(agent_api):
    """POST ?wait&until=finished: made, then held past the start until the end."""
    before = Proposal.objects.count()
    started = time.monotonic()
    stepper = later(0.5, lambda: run_next_execution(before))
    response = agent_api.post("/api/v1/proposals?wait=20&until=finished", PRINT_HI, format="json")
    elapsed = time.monotonic() - started
    stepper.join()
    assert response.status_code == 201
    body = response.json()
    assert (body["status"], body["execution_status"]) == ("approved", "succeeded")
    assert 0.9 < elapsed < 10, elapsed  # it answered the end, not the start
    assert Proposal.objects.count() == before + 1  # made once, however many passes
    result = body.pop("result")  # the run's result, inline: no second call
    assert body == agent_api.get(f"/api/v1/proposals/{body['id']}").json()
    assert_inline(result, body, agent_api)
    assert (result["exit_code"], result["status"]) == (0, "succeeded")

    replay = {**PRINT_HI, "idempotency_key": "again"}
    first = agent_api.post("/api/v1/proposals", replay, format="json").json()
    run_execution_of(first)
    started = time.monotonic()
    again = agent_api.post("/api/v1/proposals?wait=20&until=finished", replay, format="json")
    assert time.monotonic() - started < 2  # finished already: at once
    assert again.status_code == 200
    assert again.json()["id"] == first["id"]
    assert again.json()["execution_status"] == "succeeded"
    assert again.json()["result"]["status"] == "succeeded"  # finished already: with its result


def test_a_proposal_made_with_wait_until_decided_answers_the_reviewers_decision(
    agent_api, reviewer
):
    before = Proposal.objects.count()

    def approve():
        pending = Proposal.objects.order_by("-pk").first()
        services.decide(pending.pk, reviewer, "approve", "ok")

    decider = later(0.5, approve)
    response = agent_api.post("/api/v1/proposals?wait=20&until=decided", RISKY, format="json")
    decider.join()
    assert response.status_code == 201
    assert (response.json()["status"], response.json()["execution_status"]) == (
        "approved",
        "queued",
    )
    assert Proposal.objects.count() == before + 1


@pytest.mark.parametrize("query", ["wait=soon", "wait=100000", "wait=1&until=done"])
def test_a_bad_wait_on_a_proposal_made_is_a_400_that_makes_nothing(agent_api, query):
    before = Proposal.objects.count()
    response = agent_api.post(f"/api/v1/proposals?{query}", PRINT_HI, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "validation_error"
    assert Proposal.objects.count() == before


@pytest.mark.parametrize("reviewed", [False, True], ids=["approved-by-policy", "reviewed"])
def test_a_proposal_made_with_wait_under_the_asgi_handler_answers_its_result(
    agent_and_token, agent_api, reviewer, reviewed
):
    """Under the server's handler: past a reviewer's approval (a read, on a pass of its own
    through the middleware) and the execution's start, to the end."""
    from infrastructure.handler import OneHopASGIHandler

    _, token = agent_and_token
    app = OneHopASGIHandler(threads=2)
    before = Proposal.objects.count()

    async def main():
        path = "/api/v1/proposals?wait=20&until=finished"
        answer = asgi_call(app, token, "POST", path, RISKY if reviewed else PRINT_HI)
        while await asyncio.to_thread(lambda: Proposal.objects.count() == before):
            assert not answer.done(), answer.result()  # it made the proposal and waits
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        made = await asyncio.to_thread(lambda: Proposal.objects.order_by("-pk").first())
        if reviewed:
            await asyncio.to_thread(services.decide, made.pk, reviewer, "approve", "ok")
            await asyncio.sleep(0.3)
            assert not answer.done(), answer.result()  # a decision is not the end
            made = await asyncio.to_thread(lambda: Proposal.objects.get(pk=made.pk))
        await asyncio.to_thread(start_execution, made.execution_id)
        await asyncio.sleep(0.3)
        assert not answer.done(), answer.result()  # a start is not the end
        await asyncio.to_thread(end_execution, made.execution_id)
        response = await answer
        await wind_down(waiting.watcher())
        return response

    body = answered(asyncio.run(main()), 201, agent_api, inline=True)
    assert (body["status"], body["execution_status"]) == ("approved", "succeeded")
    assert Proposal.objects.count() == before + 1


def run_execution_of(proposal: dict) -> None:
    start_execution(proposal["execution_id"])
    end_execution(proposal["execution_id"])


def run_next_execution(before: int) -> None:
    """Start, then 0.5 s later end, the execution of the proposal made after ``before``."""
    wait_for(lambda: Proposal.objects.count() > before, 10)
    made = Proposal.objects.order_by("-pk").first()
    start_execution(made.execution_id)
    time.sleep(0.5)
    end_execution(made.execution_id)


def test_an_inline_result_is_cut_at_the_limit_and_points_at_the_rest(
    agent_api, reviewer_api, settings
):
    from executions import services as executions
    from executions.models import Execution
    from executions.output import ExecutionRecorder
    from executions.sandboxes.base import RunOutcome

    settings.RESULT_INLINE_BYTES = 10
    _, body = propose(agent_api, PRINT_HI)
    start_execution(body["execution_id"])
    recorder = ExecutionRecorder(body["execution_id"], cap_bytes=1024)
    recorder.write("stdout", "0123456789é-and-the-rest\n".encode())
    recorder.write("stderr", b"a warning\n")
    rest = recorder.stop()
    outcome = RunOutcome(exit_code=0, duration_ms=1, backend="local")
    executions.finish(Execution.objects.get(pk=body["execution_id"]), outcome, recorder, rest)
    answer = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=5&until=finished").json()
    result = answer["result"]
    assert (result["stdout"], result["stderr"]) == ("0123456789", "a warning\n")
    assert result["output_truncated"] is True and result["truncated"] is False
    chunks = agent_api.get(result["output_url"]).json()["chunks"]
    assert "".join(c["data"] for c in chunks if c["stream"] == "stdout") == (
        "0123456789é-and-the-rest\n"
    )
    assert "result" not in agent_api.get(f"/api/v1/proposals/{body['id']}?wait=1").json()
    assert "result" not in agent_api.get(f"/api/v1/proposals/{body['id']}").json()
    # A reviewer asks the same: the same result (reviewers read every execution).
    read = reviewer_api.get(f"/api/v1/proposals/{body['id']}?wait=1&until=finished").json()
    assert read["result"]["stdout"] == "0123456789"


def test_a_rejected_proposal_waited_until_finished_has_no_result(agent_api, reviewer_api):
    _, body = propose(agent_api, RISKY)
    reviewer_api.post(f"/api/v1/proposals/{body['id']}/reject", {"comment": "no"}, format="json")
    answer = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=2&until=finished").json()
    assert answer["status"] == "rejected" and "result" not in answer
