"""The MCP gateway: upstream tools behind Airlock's policy and review, called only once approved.

Agents connect with the official SDK's client to a running Airlock; the
upstreams are real MCP servers (``tests.gateway.upstream``) that write down
every call they receive, so "never reached" is read from the upstream itself.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from urllib.parse import urlsplit

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from tests.executions.attacks import assert_contained
from tests.gateway.conftest import SECRET, Gateway, attack_code
from tests.mcp.conftest import Progress, connect, text_of
from tests.serving import ROOT


def run(coroutine):
    return asyncio.run(coroutine)


async def listed(gateway: Gateway, token: str) -> dict:
    async with connect(gateway.served.url, token) as client:
        return {tool.name: tool for tool in (await client.list_tools()).tools}


async def call(gateway: Gateway, token: str, name: str, arguments: dict, progress=None):
    async with connect(gateway.served.url, token) as client:
        return await client.call_tool(name, arguments, progress_callback=progress)


def in_background(gateway: Gateway, tool: str, kind: str, comment: str = "") -> threading.Thread:
    thread = threading.Thread(target=gateway.decide, args=(tool, kind, comment))
    thread.start()
    return thread


def execution(gateway: Gateway, execution_id: int) -> dict:
    status, body = gateway.served.server.api(
        "GET", f"/api/v1/executions/{execution_id}", token=gateway.reviewer
    )
    assert status == 200, body
    return body


def proposals_of(gateway: Gateway, tool: str) -> list[dict]:
    _, page = gateway.served.server.api(
        "GET", "/api/v1/proposals?action=tool.call&limit=200", token=gateway.reviewer
    )
    return [p for p in page["items"] if p["parameters"]["tool"] == tool]


async def direct(name: str, arguments: dict, calls_file) -> object:
    """The same upstream, called without Airlock: what an unchanged answer looks like."""
    parameters = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.gateway.upstream", "stdio"],
        env={"UPSTREAM_CALLS": str(calls_file)},
    )
    async with Client(parameters) as client:
        return await client.call_tool(name, arguments)


def test_upstream_tools_list_as_server__tool_with_their_schemas_for_the_agents_they_are_granted(
    gateway,
):
    tools = run(listed(gateway, gateway.agent("lister", "tool.call")))
    upstream = sorted(name for name in tools if "__" in name)
    assert "up__add" in upstream and "web__whoami" in upstream and "slowup__echo" in upstream
    assert not [name for name in upstream if name.startswith("down__")]  # nobody answers there
    add = tools["up__add"]
    assert add.description.startswith("Add two whole numbers; the total is structured content.")
    assert "proposes the tool call `up.add`" in add.description
    properties = add.input_schema["properties"]
    assert properties["a"] == {"title": "A", "type": "integer"}  # the upstream's, unchanged
    assert add.input_schema["required"] == ["a", "b"]
    assert {"reason", "urgency", "idempotency_key", "wait_seconds"} <= set(properties)
    assert add.output_schema["properties"]["total"] == {"title": "Total", "type": "integer"}
    # refund has its own "reason": it goes upstream, and Airlock's envelope does without one
    refund = tools["up__refund"].input_schema["properties"]
    assert refund["reason"] == {"default": "", "title": "Reason", "type": "string"}

    scoped = run(listed(gateway, gateway.agent("scoped", "tool.call:up.echo")))
    assert [name for name in scoped if "__" in name] == ["up__echo"]
    none = run(listed(gateway, gateway.agent("scripter", "script.execute")))
    assert not [name for name in none if "__" in name]


def test_an_allowed_call_goes_upstream_once_and_its_answer_comes_back_unchanged(gateway, tmp_path):
    gateway.policy(allow=[("tool", "up.add")])
    token = gateway.agent("adder", "tool.call:up.*")
    progress = Progress()
    result = run(call(gateway, token, "up__add", {"a": 2, "b": 40, "reason": "sum"}, progress))
    plain = run(direct("add", {"a": 2, "b": 40}, tmp_path / "direct.jsonl"))
    assert result.is_error is False
    assert result.structured_content == plain.structured_content == {"total": 42, "terms": 2}
    assert result.content == plain.content
    assert [c["arguments"] for c in gateway.calls("up", "add")] == [{"a": 2, "b": 40}]

    (proposal,) = [p for p in proposals_of(gateway, "up.add") if p["agent"] == "adder"]
    done_id = proposal["execution_id"]
    assert progress.messages[-1] == f"approved by policy; execution {done_id} calls up.add upstream"
    assert (proposal["status"], proposal["decision_path"]["rule"]) == ("approved", "tool:up.add")
    done = execution(gateway, proposal["execution_id"])
    assert (done["status"], done["backend"], done["exit_code"]) == ("succeeded", "gateway", 0)
    assert '"structuredContent": {"total": 42, "terms": 2}' in done["stdout"]
    trail = gateway.served.manage(
        "shell",
        "-c",
        "from audit.models import AuditEvent; "
        f"print([(e.actor, e.verb) for e in AuditEvent.objects.filter(object_type='execution', "
        f"object_id='{proposal['execution_id']}').order_by('seq')])",
    )
    assert "('gateway', 'execution.started'), ('gateway', 'execution.succeeded')" in trail


def test_a_held_call_is_made_once_a_person_approves_and_a_rejected_one_never_reaches_upstream(
    gateway,
):
    gateway.policy()
    token = gateway.agent("held", "tool.call:up.*")
    approver = in_background(gateway, "up.echo", "approve", "fine")
    progress = Progress()
    result = run(call(gateway, token, "up__echo", {"text": "held then approved"}, progress))
    approver.join()
    assert (result.is_error, text_of(result)) == (False, "echo: held then approved")
    assert any("pending review" in message for message in progress.messages)

    rejecter = in_background(gateway, "up.refund", "reject", "not this customer")
    result = run(call(gateway, token, "up__refund", {"customer": "c-9", "amount": 500}))
    rejecter.join()
    assert result.is_error is True
    assert "not this customer" in text_of(result)
    assert result.meta["airlock"]["status"] == "rejected"
    assert gateway.calls("up", "refund") == []


def test_a_call_policy_denies_never_reaches_upstream(gateway):
    gateway.policy(deny=[("tool", "up.refund")])
    token = gateway.agent("denied", "tool.call:up.*")
    result = run(call(gateway, token, "up__refund", {"customer": "c-1", "amount": 1}))
    assert result.is_error is True
    assert "was denied by policy" in text_of(result)
    assert result.meta["airlock"]["status"] == "denied"
    assert gateway.calls("up", "refund") == []


def test_a_call_whose_wait_runs_out_is_withdrawn_and_never_reaches_upstream(gateway):
    gateway.policy()
    token = gateway.agent("impatient", "tool.call:up.*")
    arguments = {"text": "nobody waits", "idempotency_key": "echo-late", "wait_seconds": 1}
    first = run(call(gateway, token, "up__echo", arguments))
    assert first.is_error is True and first.meta["airlock"]["status"] == "withdrawn"
    pk = first.meta["airlock"]["proposal_id"]
    assert text_of(first) == (
        f'Proposal {pk} (up.echo(text="nobody waits")) was withdrawn: the gateway stopped '
        "waiting after 1 s. The upstream was not called. To propose the call anew, call this "
        "tool again with a longer wait_seconds (and a new idempotency_key, if you gave one)."
    )
    late = gateway.served.server.api(
        "POST", f"/api/v1/proposals/{pk}/approve", {}, token=gateway.reviewer
    )
    assert late[0] == 409  # a reviewer cannot approve a call nobody waits for
    again = run(call(gateway, token, "up__echo", arguments))  # the key finds it: withdrawn
    assert again.is_error is True
    assert again.meta["airlock"] == {"proposal_id": pk, "status": "withdrawn"}
    assert not [c for c in gateway.calls("up", "echo") if c["arguments"]["text"] == "nobody waits"]


def test_a_call_made_again_with_its_key_after_its_approval_answers_the_first_answer(gateway):
    gateway.policy()
    token = gateway.agent("patient", "tool.call:up.*")
    arguments = {"text": "once only", "idempotency_key": "echo-1", "wait_seconds": 30}
    approver = in_background(gateway, "up.echo", "approve")
    first = run(call(gateway, token, "up__echo", arguments))
    approver.join()
    again = run(call(gateway, token, "up__echo", arguments))
    assert text_of(first) == text_of(again) == "echo: once only"
    assert first.structured_content == again.structured_content == {"result": "echo: once only"}
    made = [c for c in gateway.calls("up", "echo") if c["arguments"]["text"] == "once only"]
    assert len(made) == 1
    changed = run(call(gateway, token, "up__echo", {**arguments, "text": "something else"}))
    assert changed.is_error is True and "key 'echo-1' was already used for proposal" in text_of(
        changed
    )


def test_a_call_the_agent_may_not_propose_now_is_a_tool_error_and_never_reaches_upstream(
    gateway,
):
    full, paused = (
        gateway.agent("gw-full", "tool.call:up.*"),
        gateway.agent("gw-paused", "tool.call"),
    )
    served = gateway.served
    overrides = {"gw-full": {"max_pending": 1}}
    served.manage(
        "shell",
        "-c",
        "from approvals.policy.rules import DEFAULT_POLICY, update_policy; "
        f"update_policy({{**DEFAULT_POLICY, 'agent_overrides': {overrides!r}}}, None, 'test', "
        "actor='test')",
    )
    served.manage("agents", "pause", "gw-paused", "--reason", "runaway loop")
    status, held = served.server.api(
        "POST",
        "/api/v1/proposals",
        {"action": "tool.call", "parameters": {"tool": "up.add", "arguments": {"a": 1, "b": 2}}},
        token=full,
    )
    assert status == 201 and held["status"] == "pending", held
    refused = run(call(gateway, full, "up__echo", {"text": "one too many"}))
    assert refused.is_error is True
    error = refused.structured_content["error"]
    assert error["type"] == "too_many_pending" and 1 <= error["retry_after"] <= 60
    assert text_of(refused).startswith("too_many_pending: agent gw-full has 1 proposals waiting")
    assert text_of(refused).endswith(f"; try again in {error['retry_after']} s")
    stopped = run(call(gateway, paused, "up__echo", {"text": "one too many"}))
    assert stopped.is_error is True and stopped.structured_content["error"]["type"] == (
        "agent_paused"
    )
    assert text_of(stopped).endswith("(runaway loop); an admin must resume it; do not retry")
    assert not [c for c in gateway.calls("up", "echo") if c["arguments"]["text"] == "one too many"]


def test_the_upstreams_own_error_comes_back_as_it_gave_it_and_the_execution_failed(gateway):
    gateway.policy(allow=[("tool", "up.fail")])
    token = gateway.agent("failing", "tool.call:up.*")
    result = run(call(gateway, token, "up__fail", {"why": "the account is closed"}))
    assert (result.is_error, text_of(result)) == (True, "cannot: the account is closed")
    (proposal,) = [p for p in proposals_of(gateway, "up.fail") if p["agent"] == "failing"]
    done = execution(gateway, proposal["execution_id"])
    assert (done["status"], done["error"]) == ("failed", "upstream up answered with an error")


def test_a_stdio_upstream_that_crashes_is_a_tool_error_and_is_started_again(gateway):
    gateway.policy(allow=[("tool", "up.*")])
    token = gateway.agent("crasher", "tool.call:up.*")
    assert text_of(run(call(gateway, token, "up__echo", {"text": "before"}))) == "echo: before"
    crashed = run(call(gateway, token, "up__crash", {}))
    assert crashed.is_error is True
    assert "upstream up closed the connection during crash" in text_of(crashed)
    (dead,) = [c["process"] for c in gateway.calls("up", "crash")]  # made once, not again
    # Each web process has its own upstream; whichever answers, the dead one is started again.
    for n in range(4):
        after = run(call(gateway, token, "up__echo", {"text": f"after {n}"}))
        assert (after.is_error, text_of(after)) == (False, f"echo: after {n}")
    served = {
        c["process"] for c in gateway.calls("up", "echo") if c["arguments"]["text"][:5] == "after"
    }
    assert dead not in served
    (proposal,) = [p for p in proposals_of(gateway, "up.crash") if p["agent"] == "crasher"]
    assert execution(gateway, proposal["execution_id"])["status"] == "failed"


def test_an_upstream_that_is_slow_or_down_is_a_tool_error_that_says_so(gateway):
    gateway.policy(allow=[("tool", "slowup.*"), ("tool", "down.*")])
    token = gateway.agent("waiter", "tool.call")
    slow = run(call(gateway, token, "slowup__slow", {"seconds": 5}))
    assert slow.is_error is True
    assert "upstream slowup did not answer slow within 1 s" in text_of(slow)
    down = run(call(gateway, token, "down__anything", {}))
    assert down.is_error is True
    assert "upstream down is unreachable: it refused the connection" in text_of(down)
    assert proposals_of(gateway, "down.anything") == []  # nothing to propose a call of


def test_an_http_upstream_gets_its_headers_with_airlocks_environment_read_in(gateway):
    gateway.policy(allow=[("tool", "web.*"), ("tool", "up.getenv")])
    token = gateway.agent("webby", "tool.call")
    result = run(call(gateway, token, "web__whoami", {}))
    assert (result.is_error, text_of(result)) == (False, f"Bearer {SECRET}")
    # a stdio upstream gets its own env and a minimal environment, not Airlock's
    seen = run(call(gateway, token, "up__getenv", {"name": "FROM_AIRLOCK"}))
    assert text_of(seen) == SECRET
    hidden = run(call(gateway, token, "up__getenv", {"name": "AIRLOCK_DATA_DIR"}))
    assert text_of(hidden) == "<unset>"


def test_bad_calls_are_refused_before_anything_is_proposed(gateway):
    gateway.policy(allow=[("tool", "up.*")])
    token = gateway.agent("sloppy", "tool.call:up.*")
    wrong = run(call(gateway, token, "up__add", {"a": "two", "b": 3}))
    assert wrong.is_error is True
    assert "invalid arguments: a: 'two' is not of type 'integer'" in text_of(wrong)
    missing = run(call(gateway, token, "up__add", {"a": 1}))
    assert "'b' is a required property" in text_of(missing)
    unknown = run(call(gateway, token, "up__nope", {}))
    assert "upstream up has no tool 'nope'" in text_of(unknown)
    envelope = run(call(gateway, token, "up__echo", {"text": "x", "urgency": "whenever"}))
    assert "urgency" in text_of(envelope) and envelope.is_error is True
    assert [p for p in proposals_of(gateway, "up.add") if p["agent"] == "sloppy"] == []
    reviewer = run(call(gateway, gateway.reviewer, "up__echo", {"text": "x"}))
    assert "only agent tokens can call tools" in text_of(reviewer)
    ungranted = run(
        call(gateway, gateway.agent("other", "tool.call:web.*"), "up__echo", {"text": "x"})
    )
    assert ungranted.is_error is True and "capabilit" in text_of(ungranted)
    assert not [c for c in gateway.calls("up", "echo") if c["arguments"]["text"] == "x"]


def test_the_attack_code_run_as_an_upstreams_tool_is_contained_as_a_scripts_is(gateway):
    """The adversarial suites' steps, from inside the server's own process."""
    gateway.policy(allow=[("tool", "up.attack")])
    token = gateway.agent("attacker", "tool.call:up.attack")
    served = gateway.served
    code = attack_code(served.data, urlsplit(served.server.base).port, served.server.process.pid)
    result = run(call(gateway, token, "up__attack", {"code": code}))
    assert result.is_error is False, text_of(result)
    assert_contained(text_of(result), (served.data / "secret_key").read_text().strip())
    assert not (served.data / "planted").exists()


def test_a_stdio_upstream_runs_sandboxed_away_from_airlocks_key_data_and_ports(gateway):
    """Its tools try what a hostile server would; its legitimate tools still answer."""
    gateway.policy(allow=[("tool", "up.probe"), ("tool", "up.scratch"), ("tool", "up.fetch")])
    token = gateway.agent("prober", "tool.call:up.*")

    def probe(**arguments) -> str:
        result = run(call(gateway, token, "up__probe", arguments))
        assert result.is_error is False, text_of(result)
        return text_of(result)

    data = gateway.served.data
    assert (data / "secret_key").exists()
    port = urlsplit(gateway.served.server.base).port
    refused = {
        "the secret key": probe(path=str(data / "secret_key")),
        "the database": probe(path=str(data / "airlock.sqlite3")),
        "the data dir": probe(folder=str(data)),
        "the checkout beyond its own paths": probe(path=str(ROOT / "pyproject.toml")),
        "the host's passwords": probe(path="/etc/shadow"),
        "Airlock's port": probe(host="127.0.0.1", port=port),
        "Redis": probe(host="127.0.0.1", port=6379),
        "PostgreSQL": probe(host="127.0.0.1", port=5432),
        "an outside address": probe(host="1.1.1.1", port=53),
    }
    assert {what: said for what, said in refused.items() if not said.startswith("refused")} == {}
    # What its configuration gives it: its code (read), its calls file (write), a scratch dir.
    assert probe(path=str(ROOT / "tests" / "gateway" / "upstream.py")).startswith("read ")
    assert gateway.calls("up", "probe")[-1]["arguments"]["path"].endswith("upstream.py")
    scratch = run(call(gateway, token, "up__scratch", {"text": "kept"}))
    assert text_of(scratch).endswith(": kept")
    assert str(data) not in text_of(scratch)

    # Its network list names the HTTP upstream's port: that, through its proxy, and no other.
    def fetch(host: str, port: int) -> str:
        return text_of(run(call(gateway, token, "up__fetch", {"host": host, "port": port})))

    assert fetch("127.0.0.1", gateway.web_port).startswith("answered ")
    assert fetch("127.0.0.1", port) == "refused: Tunnel connection failed: 403 Forbidden"
    assert fetch("localhost", gateway.web_port).endswith("403 Forbidden")  # listed by address
    assert probe(host="127.0.0.1", port=gateway.web_port).startswith("refused")  # not around it
