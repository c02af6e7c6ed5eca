"""``airlock_sdk``, installed as agent builders install it, against a running ``serve``:
scripts, proposals, a function behind approval (sync and async), every way it ends."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import json
import threading
import time

import airlock_sdk  # installed by scripts/bootstrap from sdk/, as agent builders install it
import pytest

from tests.serving import agent_token, decide_when_pending, manage, start_server, user_token


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("sdk") / "data"
    server = start_server(data_dir)
    server.data_dir = data_dir
    server.reviewer = user_token(data_dir, "reviewer")
    server.agent_token = agent_token(
        data_dir, "billing-bot", "script.execute", "tool.call:billing.*"
    )
    yield server
    server.stop()


@pytest.fixture
def airlock(deployment):
    with airlock_sdk.Airlock(deployment.base, deployment.agent_token) as client:
        yield client


def test_a_script_runs_behind_the_policy_and_answers_its_result(airlock):
    result = airlock.run_script("print('hi')", reason="smoke test")
    assert (result.status, result.exit_code, result.stdout) == ("succeeded", 0, "hi\n")
    with pytest.raises(airlock_sdk.Failed) as failed:
        airlock.run_script("import sys\nprint('no', file=sys.stderr)\nsys.exit(3)")
    assert failed.value.result.exit_code == 3 and failed.value.result.stderr == "no\n"
    assert failed.value.reason == "exit code 3"


def test_an_approved_call_runs_and_its_return_value_is_reported(airlock, deployment):
    refunds = []

    @airlock.requires_approval(tool="billing.refund")
    def refund(customer: str, amount: float, currency: str = "EUR") -> dict:
        """Refund a customer."""
        refunds.append((customer, amount))
        return {"refund_id": "re_123", "amount": amount}

    reviewer = decide_when_pending(deployment, "billing.refund", "approve", "ok")
    assert refund("cus_42", 30.5) == {"refund_id": "re_123", "amount": 30.5}
    reviewer.join()
    assert refunds == [("cus_42", 30.5)]
    _, page = deployment.api("GET", "/api/v1/proposals?action=tool.call", token=deployment.reviewer)
    proposal = next(p for p in page["items"] if p["parameters"]["tool"] == "billing.refund")
    assert proposal["parameters"]["arguments"] == {
        "customer": "cus_42", "amount": 30.5, "currency": "EUR",
    }  # fmt: skip
    assert proposal["reason"] == "Refund a customer."
    execution = airlock.result(proposal["execution_id"])
    assert execution.status == "succeeded"
    assert json.loads(execution.stdout) == {"refund_id": "re_123", "amount": 30.5}


def test_an_approved_call_that_returns_nothing_is_reported_as_done(airlock, deployment):
    sent = []

    @airlock.requires_approval(tool="billing.notify", reason="tell the customer")
    def notify(customer: str) -> None:
        sent.append(customer)

    reviewer = decide_when_pending(deployment, "billing.notify", "approve", "ok")
    assert notify("cus_9") is None
    reviewer.join()
    assert sent == ["cus_9"]
    _, page = deployment.api("GET", "/api/v1/proposals?action=tool.call", token=deployment.reviewer)
    proposal = next(p for p in page["items"] if p["parameters"]["tool"] == "billing.notify")
    execution = airlock.result(proposal["execution_id"])
    assert (execution.status, execution.stdout) == ("succeeded", "")


def test_a_rejected_call_never_runs_and_says_why(airlock, deployment):
    ran = []

    @airlock.requires_approval(tool="billing.close_account", reason="the customer asked")
    def close(customer: str) -> None:
        ran.append(customer)

    reviewer = decide_when_pending(deployment, "billing.close_account", "reject", "not this one")
    with pytest.raises(airlock_sdk.Rejected) as rejected:
        close("cus_7")
    reviewer.join()
    assert ran == []
    assert rejected.value.reason == "reviewer: not this one"
    assert rejected.value.proposal.status == "rejected"


def test_a_call_outside_the_agents_tools_is_denied_at_once(airlock):
    @airlock.requires_approval(tool="mail.send")
    def send(to: str) -> None:
        raise AssertionError("must not run")

    with pytest.raises(airlock_sdk.Denied) as denied:
        send("someone@example.org")
    assert "no capability for tool.call" in denied.value.reason


def test_an_exception_of_the_function_is_reported_and_raised(airlock, deployment):
    @airlock.requires_approval(tool="billing.charge")
    def charge(amount: int) -> None:
        raise RuntimeError("card declined")

    reviewer = decide_when_pending(deployment, "billing.charge", "approve")
    with pytest.raises(RuntimeError, match="card declined"):
        charge(5)
    reviewer.join()
    _, page = deployment.api("GET", "/api/v1/executions?status=failed", token=deployment.reviewer)
    failed = airlock.result(page["items"][0]["id"])
    assert (failed.status, failed.stdout) == ("failed", "RuntimeError: card declined")


def test_nobody_deciding_in_time_raises_not_decided(airlock):
    proposal = airlock.propose("tool.call", {"tool": "billing.audit", "arguments": {}})
    assert proposal.status == "pending"
    started = time.monotonic()
    with pytest.raises(airlock_sdk.NotDecided):
        airlock.wait(proposal, timeout=1)
    assert time.monotonic() - started < 10


def test_the_apis_refusals_are_errors_with_their_type(deployment, airlock):
    with pytest.raises(airlock_sdk.ApiError) as refused:
        airlock.propose("tool.call", {"tool": "billing.x", "arguments": [1]})
    assert (refused.value.status, refused.value.type) == (400, "validation_error")
    assert "arguments: must be a JSON object" in refused.value.message
    with (
        airlock_sdk.Airlock(deployment.base, "alk_wrong") as wrong,
        pytest.raises(airlock_sdk.ApiError) as unknown,
    ):
        wrong.run_script("print(1)")
    assert unknown.value.status == 401
    with (
        airlock_sdk.Airlock("http://127.0.0.1:9", "alk_x") as down,
        pytest.raises(airlock_sdk.Unavailable),
    ):
        down.result(1)


def test_the_async_client_decorates_async_functions(deployment):
    async def scenario():
        async with airlock_sdk.AsyncAirlock(deployment.base, deployment.agent_token) as airlock:

            @airlock.requires_approval(tool="billing.refund_async")
            async def refund(amount: int) -> str:
                await asyncio.sleep(0)
                return f"refunded {amount}"

            script = await airlock.run_script("print(6 * 7)")
            reviewer = decide_when_pending(deployment, "billing.refund_async", "approve")
            value = await refund(12)
            reviewer.join()
            return script, value

    script, value = asyncio.run(scenario())
    assert script.stdout == "42\n" and value == "refunded 12"
    with pytest.raises(TypeError, match="is not async"):
        airlock_sdk.AsyncAirlock(deployment.base, "x").requires_approval(tool="t")(lambda: 1)


class DropFirstAnswers(http.server.BaseHTTPRequestHandler):
    """In front of the server: each request is sent on, but the first ``drops`` answers to a
    POST are thrown away and the connection closed, as a proxy does when its backend dies
    after doing the work (the client sees the connection end with no response)."""

    upstream = ""
    drops = 0
    posts: list[str] = []  # noqa: RUF012 - set per test

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        connection = http.client.HTTPConnection(self.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        connection.request(self.command, self.path, body=body or None, headers=headers)
        answer = connection.getresponse()
        payload = answer.read()
        if self.command == "POST":
            type(self).posts.append(self.path)
            if type(self).drops > 0:
                type(self).drops -= 1
                self.close_connection = True
                return  # nothing sent back
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _forward

    def log_message(self, *args) -> None:
        pass


def test_a_proposal_whose_answer_was_lost_is_asked_again_and_made_once(deployment):
    DropFirstAnswers.upstream = deployment.base.removeprefix("http://").rstrip("/")
    DropFirstAnswers.drops, DropFirstAnswers.posts = 2, []
    front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), DropFirstAnswers)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    marker = f"print('lost answer {time.monotonic_ns()}')"
    try:
        with airlock_sdk.Airlock(
            f"http://127.0.0.1:{front.server_port}", deployment.agent_token
        ) as airlock:
            proposal = airlock.propose("script.execute", {"language": "python", "code": marker})
    finally:
        front.shutdown()
    _, page = deployment.api("GET", "/api/v1/proposals?action=script.execute&limit=200",
                             token=deployment.reviewer)  # fmt: skip
    made = [p for p in page["items"] if p["parameters"]["code"] == marker]
    assert DropFirstAnswers.posts == ["/api/v1/proposals"] * 3  # two answers lost, the third read
    assert [p["id"] for p in made] == [proposal.id]  # made once: the key found it again


# --- withdrawing, and proposals the server refuses for now -------------------------------


def waited_until_withdrawn(airlock, deployment, until: str) -> tuple[float, list]:
    """Withdraw a proposal while another client long-polls it (``until``): how long the
    wait went on after the withdrawal, and what it raised."""
    proposal = airlock.propose("tool.call", {"tool": f"billing.migrate_{until}", "arguments": {}})
    ended: list[BaseException] = []

    def wait() -> None:
        with airlock_sdk.Airlock(deployment.base, deployment.agent_token) as waiter:
            try:
                waiter.wait(proposal, until=until, timeout=60)
            except airlock_sdk.AirlockError as exc:
                ended.append(exc)

    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.5)  # the long-poll is under way
    started = time.monotonic()
    withdrawn = airlock.withdraw(proposal, reason="the migration is not needed")
    assert (withdrawn.status, withdrawn.reason) == ("withdrawn", "the migration is not needed")
    waiting.join(timeout=60)
    return time.monotonic() - started, ended


def test_a_withdrawn_proposal_ends_the_wait_on_it_and_cannot_be_withdrawn_twice(
    airlock, deployment
):
    took, ended = waited_until_withdrawn(airlock, deployment, "decided")
    assert took < 10  # the long-poll ended on it, not at its end (30 s)
    (error,) = ended
    assert isinstance(error, airlock_sdk.Withdrawn)
    proposal = error.proposal
    assert str(error) == f"proposal #{proposal.id} withdrawn: the migration is not needed"
    with pytest.raises(airlock_sdk.Withdrawn):
        airlock.wait(proposal.id)
    with pytest.raises(airlock_sdk.ApiError) as twice:
        airlock.withdraw(proposal.id)
    assert (twice.value.status, twice.value.type) == (409, "conflict")
    with (
        airlock_sdk.Airlock(deployment.base, deployment.reviewer) as person,
        pytest.raises(airlock_sdk.ApiError) as theirs,
    ):
        person.withdraw(airlock.propose("tool.call", {"tool": "billing.y", "arguments": {}}).id)
    assert (theirs.value.status, theirs.value.type) == (404, "not_found")


def test_a_wait_until_finished_ends_when_the_proposal_is_withdrawn(airlock, deployment):
    took, ended = waited_until_withdrawn(airlock, deployment, "finished")
    assert [type(error) for error in ended] == [airlock_sdk.Withdrawn]
    assert took < 10


def test_the_async_client_withdraws(deployment):
    async def scenario():
        async with airlock_sdk.AsyncAirlock(deployment.base, deployment.agent_token) as airlock:
            proposal = await airlock.propose("tool.call", {"tool": "billing.z", "arguments": {}})
            return await airlock.withdraw(proposal.id, "changed my mind")

    withdrawn = asyncio.run(scenario())
    assert (withdrawn.status, withdrawn.raw["withdraw_reason"]) == ("withdrawn", "changed my mind")


def test_a_wait_that_runs_out_withdraws_unless_a_decision_came_first(airlock, deployment):
    from airlock_sdk import flows

    waited = airlock.propose("tool.call", {"tool": "billing.w", "arguments": {}})
    with pytest.raises(airlock_sdk.NotDecided):
        airlock.wait(waited, timeout=0, withdraw_reason="the agent stopped waiting")
    with pytest.raises(airlock_sdk.Withdrawn) as gone:
        airlock.wait(waited.id)
    assert gone.value.reason == "the agent stopped waiting"

    # Approved while the client still saw it pending: the withdrawal's 409, then the decision.
    stale = airlock.propose("tool.call", {"tool": "billing.w", "arguments": {}})
    _, approved = deployment.api(
        "POST", f"/api/v1/proposals/{stale.id}/approve", {"comment": "go"},
        token=deployment.reviewer,
    )  # fmt: skip
    assert approved["status"] == "approved", approved
    decided = airlock._drive(flows.wait(stale, "decided", 0, "the agent stopped waiting"))
    assert (decided.id, decided.status) == (stale.id, "approved")


@pytest.fixture(scope="module")
def limited(deployment):
    """Agents with limits of their own: one pending proposal (queue-bot), 30 proposals a
    minute (burst-bot), and one an admin paused (paused-bot)."""
    tokens = {
        name: agent_token(deployment.data_dir, name, "tool.call")
        for name in ("queue-bot", "burst-bot", "paused-bot")
    }
    overrides = {"queue-bot": {"max_pending": 1}, "burst-bot": {"max_proposals_per_minute": 30}}
    manage(
        deployment.data_dir,
        "shell",
        "-c",
        f"from tests.conftest import use_policy; use_policy(agent_overrides={overrides!r})",
    )
    manage(deployment.data_dir, "agents", "pause", "paused-bot", "--reason", "runaway loop")
    return tokens


def soon(deployment, proposal_id: int, seconds: int) -> None:
    """Make a pending proposal expire in ``seconds``: the server's Retry-After for a full
    queue is the time until the agent's first pending proposal ends."""
    manage(
        deployment.data_dir,
        "shell",
        "-c",
        "from datetime import timedelta; from django.utils import timezone; "
        f"from approvals.models import Proposal; Proposal.objects.filter(pk={proposal_id})"
        f".update(expires_at=timezone.now() + timedelta(seconds={seconds}))",
    )


def test_a_full_queue_is_waited_out_and_the_same_proposal_made_once_a_place_frees(
    deployment, limited, caplog
):
    with airlock_sdk.Airlock(deployment.base, limited["queue-bot"]) as bot:
        first = bot.propose("tool.call", {"tool": "queue.first", "arguments": {}})
        assert first.status == "pending"
        with pytest.raises(airlock_sdk.RateLimited) as full:
            airlock_sdk.Airlock(deployment.base, limited["queue-bot"], rate_limit_wait=0).propose(
                "tool.call", {"tool": "queue.second", "arguments": {}}
            )
        assert (full.value.status, full.value.type) == (429, "too_many_pending")
        assert 1 <= full.value.retry_after <= 60 and "max_pending 1" in full.value.message
        soon(deployment, first.id, 4)
        freeing = threading.Timer(1, bot.withdraw, args=(first.id, "superseded"))
        freeing.start()
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="airlock_sdk"):
            second = bot.propose(
                "tool.call", {"tool": "queue.second", "arguments": {}}, idempotency_key="q-2"
            )
        waited = time.monotonic() - started
        freeing.join()
    assert second.status == "pending" and second.raw["idempotency_key"] == "q-2"
    assert 1 <= waited < 15
    said = [r.getMessage() for r in caplog.records if r.name == "airlock_sdk"]
    assert said and said[0].startswith("too_many_pending: retrying in ")
    _, page = deployment.api("GET", "/api/v1/proposals?agent=queue-bot", token=deployment.reviewer)
    tools = sorted((p["parameters"]["tool"], p["status"]) for p in page["items"])
    assert tools == [("queue.first", "withdrawn"), ("queue.second", "pending")]


def test_a_burst_past_the_rate_waits_its_retry_after_and_goes_through(deployment, limited, caplog):
    with (
        airlock_sdk.Airlock(deployment.base, limited["burst-bot"]) as bot,
        airlock_sdk.Airlock(deployment.base, limited["burst-bot"], rate_limit_wait=0) as hasty,
    ):
        for n in range(60):  # the bucket's burst (30), and what refills meanwhile
            try:
                hasty.propose("tool.call", {"tool": f"burst.n{n}", "arguments": {}})
            except airlock_sdk.RateLimited as refused:
                assert (refused.type, refused.retry_after) in (
                    ("rate_limited", 1),
                    ("rate_limited", 2),
                )
                break
        else:
            raise AssertionError("60 proposals in a burst and none refused")
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="airlock_sdk"):
            last = bot.propose("tool.call", {"tool": "burst.last", "arguments": {}})
        waited = time.monotonic() - started
    assert last.status == "pending"
    assert 0.5 <= waited < 10
    said = [r.getMessage() for r in caplog.records if r.name == "airlock_sdk"]
    assert said and said[0].startswith("rate_limited: retrying in ")


class CountPosts(DropFirstAnswers):
    """The same front, dropping nothing: it counts the POSTs that reach the server."""

    posts: list[str] = []  # noqa: RUF012 - set per test


def test_a_paused_agent_is_refused_at_once_and_never_retried(deployment, limited):
    CountPosts.upstream = deployment.base.removeprefix("http://").rstrip("/")
    CountPosts.drops, CountPosts.posts = 0, []
    front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CountPosts)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    started = time.monotonic()
    try:
        with (
            airlock_sdk.Airlock(
                f"http://127.0.0.1:{front.server_port}", limited["paused-bot"]
            ) as bot,
            pytest.raises(airlock_sdk.Paused) as paused,
        ):
            bot.propose("tool.call", {"tool": "loop.again", "arguments": {}})
    finally:
        front.shutdown()
    assert time.monotonic() - started < 5
    assert CountPosts.posts == ["/api/v1/proposals"]  # once
    assert (paused.value.status, paused.value.type) == (423, "agent_paused")
    assert (
        "runaway loop" in paused.value.message and "an admin must resume it" in paused.value.message
    )
