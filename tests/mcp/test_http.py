"""Airlock as an MCP server over streamable HTTP, driven by the official SDK's client."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.conftest import (
    ONE_REVIEWER,
    TWO_REVIEWERS,
    Progress,
    connect,
    innermost,
    text_of,
)

READ_TOOLS = {"get_proposal", "get_execution", "cancel_execution", "list_capabilities"}


async def names(client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def test_it_lists_only_the_tools_the_tokens_capabilities_allow(served):
    async with connect(served.url, served.server.token) as client:
        demo = await names(client)
    scripts_only = served.new_agent("scripts-only", "script.execute")
    async with connect(served.url, scripts_only) as client:
        assert await names(client) == {"script_execute", "withdraw"} | READ_TOOLS
    # The demo agent: script.execute, sandbox.*, docker.*, host.service_status.
    assert {"script_execute", "sandbox_execute", "sandbox_create", "docker_stop_container"} <= demo
    assert "host_service_status" in demo
    assert not {"host_exec", "host_kill_process", "host_restart_service"} & demo
    assert not [name for name in demo if "approve" in name or "reject" in name]


async def test_a_tools_input_schema_is_its_actions_parameters_and_the_envelope(served):
    async with connect(served.url, served.server.token) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    schema = tools["script_execute"].input_schema
    assert schema["required"] == ["language", "code"]
    assert schema["properties"]["language"]["enum"] == ["python", "bash", "javascript"]
    assert schema["properties"]["timeout_seconds"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 300,
        "default": 30,
        "description": "Wall-clock limit; the run is killed at it.",
    }
    assert {"reason", "urgency", "idempotency_key", "wait_seconds"} <= set(schema["properties"])
    container = tools["docker_stop_container"].input_schema["properties"]["container"]
    assert container["pattern"].startswith("^") and container["pattern"].endswith("$")
    assert "script.execute" in tools["script_execute"].description
    assert tools["docker_inspect_container"].annotations.read_only_hint is True


async def test_a_low_risk_script_runs_and_returns_its_result(served):
    progress = Progress()
    async with connect(served.url, served.server.token) as client:
        result = await client.call_tool(
            "script_execute",
            {"language": "python", "code": "print(1)", "reason": "smoke test"},
            progress_callback=progress,
        )
    assert result.is_error is False, text_of(result)
    content = result.structured_content
    assert content["outcome"] == "succeeded"
    assert content["proposal"]["status"] == "approved"
    execution = content["execution"]
    assert (execution["stdout"], execution["stderr"], execution["exit_code"]) == ("1\n", "", 0)
    assert execution["truncated"] is False
    assert execution["backend"]
    assert len(execution["provenance"]["command_hash"]) == 64
    assert "script.execute succeeded" in text_of(result)
    assert "stdout:\n1" in text_of(result)
    assert progress.messages[0].startswith("approved by policy; execution")
    assert "".join(progress.messages[1:]) == "1\n"  # the output, streamed before the answer
    # The result as REST's ?until=finished carries it inline: one shape for both.
    status, rest = served.server.api(
        "GET",
        f"/api/v1/proposals/{content['proposal_id']}?wait=5&until=finished",
        token=served.server.token,
    )
    assert status == 200 and content["result"] == rest["result"]
    assert (content["result"]["stdout"], content["result"]["output_truncated"]) == ("1\n", False)


async def test_a_risky_script_waits_for_two_reviewers_and_streams_its_output(served):
    reviewers = [served.user_token("reviewer"), served.user_token("reviewer2")]
    progress = Progress()
    async with connect(served.url, served.server.token) as client:
        call = asyncio.create_task(
            client.call_tool(
                "script_execute",
                {"language": "python", "code": TWO_REVIEWERS, "wait_seconds": 120},
                progress_callback=progress,
            )
        )
        found = await progress.wait_for(
            r"proposal (\d+): pending review \(2 of 2 approvals needed, expires in (59|60) min\)"
        )
        pk = int(found.group(1))
        await asyncio.to_thread(served.decide, pk, "approve", reviewers[0], "looks fine")
        await progress.wait_for(rf"proposal {pk}: pending review \(1 of 2 approvals needed")
        assert not call.done()
        await asyncio.to_thread(served.decide, pk, "approve", reviewers[1], "fine by me")
        result = await asyncio.wait_for(call, 60)
    assert result.is_error is False, text_of(result)
    assert result.structured_content["execution"]["stdout"] == "line 0\nline 1\nline 2\n"
    approved = progress.messages.index(
        f"approved by reviewer, reviewer2; execution {result.structured_content['execution']['id']} queued"
    )
    streamed = "".join(progress.messages[approved + 1 :])
    assert streamed == "line 0\nline 1\nline 2\n"
    assert progress.values == sorted(set(progress.values))  # progress only goes up


async def test_a_rejection_comes_back_as_a_tool_error_with_the_comment(served):
    reviewer = served.user_token("reviewer")
    progress = Progress()
    async with connect(served.url, served.server.token) as client:
        call = asyncio.create_task(
            client.call_tool(
                "script_execute",
                {"language": "python", "code": ONE_REVIEWER, "reason": "tidy up"},
                progress_callback=progress,
            )
        )
        pk = int((await progress.wait_for(r"proposal (\d+): pending review")).group(1))
        await asyncio.to_thread(served.decide, pk, "reject", reviewer, "not on a Friday")
        result = await asyncio.wait_for(call, 30)
    assert result.is_error is True
    assert "was rejected by reviewer: not on a Friday" in text_of(result)
    assert result.structured_content["outcome"] == "rejected"


async def test_a_denied_proposal_is_a_tool_error_with_the_reason(served):
    async with connect(served.url, served.server.token) as client:
        result = await client.call_tool("host_exec", {"command": "uptime"})
    assert result.is_error is True
    assert "denied by policy: the agent has no capability for host.exec" in text_of(result)


async def test_a_wait_that_runs_out_returns_the_id_and_get_proposal_finds_the_result(served):
    reviewer = served.user_token("reviewer")
    async with connect(served.url, served.server.token) as client:
        first = await client.call_tool(
            "script_execute", {"language": "python", "code": ONE_REVIEWER, "wait_seconds": 1}
        )
        assert first.is_error is False
        assert first.structured_content["outcome"] == "pending"
        pk = first.structured_content["proposal_id"]
        assert f"Call get_proposal with proposal_id {pk}" in text_of(first)
        await asyncio.to_thread(served.decide, pk, "approve", reviewer)
        later = await client.call_tool("get_proposal", {"proposal_id": pk, "wait_seconds": 30})
    assert later.is_error is False, text_of(later)
    assert later.structured_content["outcome"] == "succeeded"
    assert later.structured_content["execution"]["stdout"] == "line 0\nline 1\nline 2\n"


async def test_an_idempotent_retry_after_a_dropped_connection_makes_no_second_proposal(served):
    reviewer = served.user_token("reviewer")
    arguments = {"language": "python", "code": ONE_REVIEWER, "idempotency_key": "retry-me"}
    progress = Progress()
    async with connect(served.url, served.server.token) as client:
        call = asyncio.create_task(
            client.call_tool("script_execute", arguments, progress_callback=progress)
        )
        pk = int((await progress.wait_for(r"proposal (\d+): pending review")).group(1))
        call.cancel()  # the agent goes away mid-call, with the connection
        with pytest.raises(asyncio.CancelledError):
            await call
    status, kept = served.server.api("GET", f"/api/v1/proposals/{pk}")
    assert (status, kept["status"]) == (200, "pending")
    async with connect(served.url, served.server.token) as client:
        again = await client.call_tool("script_execute", {**arguments, "wait_seconds": 1})
        assert again.structured_content["proposal_id"] == pk
        await asyncio.to_thread(served.decide, pk, "approve", reviewer)
        done = await client.call_tool("script_execute", {**arguments, "wait_seconds": 30})
    assert done.structured_content["proposal_id"] == pk
    assert done.structured_content["outcome"] == "succeeded"
    assert served.server.api("GET", f"/api/v1/proposals/{pk + 1}")[0] == 404


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (
            "script_execute",
            {"language": "python", "code": "print(1)", "colour": "red"},
            "unknown argument(s) colour; this tool takes language, code, timeout_seconds",
        ),
        (
            "script_execute",
            {"language": "cobol", "code": "print(1)"},
            'invalid arguments: language: "cobol" is not a valid choice.',
        ),
        (
            "script_execute",
            {"language": "python"},
            "invalid arguments: code: This field is required.",
        ),
        (
            "script_execute",
            {"language": "python", "code": "print(1)", "timeout_seconds": "soon"},
            "invalid arguments: timeout_seconds: A valid integer is required.",
        ),
        (
            "script_execute",
            {"language": "python", "code": "print(1)", "wait_seconds": 99999},
            "invalid arguments: wait_seconds: Ensure this value is less than or equal to 3600.",
        ),
        (
            "script_execute",
            {"language": "python", "code": "print(1)", "urgency": "yesterday"},
            'invalid arguments: urgency: "yesterday" is not a valid choice.',
        ),
        (
            "get_proposal",
            {"proposal_id": "latest"},
            "invalid arguments: proposal_id: A valid integer is required.",
        ),
        (
            "get_proposal",
            {"proposal_id": 999999},
            "proposal 999999 does not exist or is not visible to you",
        ),
        ("get_execution", {}, "invalid arguments: execution_id: This field is required."),
        ("list_capabilities", {"everything": True}, "unknown argument(s) everything"),
        (
            "sandbox_execute",
            {"session_id": 999999, "code": "print(1)"},
            "sandbox session 999999 does not exist or is not yours",
        ),
    ],
)
async def test_bad_arguments_get_a_clear_tool_error(served, tool, arguments, message):
    async with connect(served.url, served.server.token) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error is True
    assert message in text_of(result)


async def test_an_unknown_tool_is_a_protocol_error_not_a_server_error(served):
    async with connect(served.url, served.server.token) as client:
        with pytest.raises(MCPError, match="unknown tool 'approve_proposal'"):
            await client.call_tool("approve_proposal", {"proposal_id": 1})


def post_mcp(url: str, token: str | None) -> tuple[int, dict, str]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json, text/event-stream")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {}, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers.get("WWW-Authenticate", "")


def test_every_web_process_answers_without_a_session(served):
    assert len(served.server.web_processes()) >= 2
    answers = [post_mcp(served.url, served.server.token) for _ in range(20)]  # 20 connections
    assert all(status == 200 and '"script_execute"' in text for status, _, text in answers)
    # Each web process starts its session manager on its first MCP request.
    started = served.server.log.read_text().count("StreamableHTTP session manager started")
    assert started == len(served.server.web_processes())


async def test_a_missing_or_revoked_token_is_refused_with_a_401(served):
    status, body, challenge = post_mcp(served.url, None)
    assert status == 401
    assert body["error"]["type"] == "not_authenticated"
    assert "Authorization: Bearer" in body["error"]["message"]
    assert challenge == 'Bearer realm="airlock"'

    token = served.new_agent("soon-revoked", "script.execute")
    assert post_mcp(served.url, token)[0] == 200
    served.deactivate_agent("soon-revoked")
    status, body, _ = post_mcp(served.url, token)
    assert status == 401
    assert body["error"] == {
        "type": "not_authenticated",
        "message": "invalid or revoked token",
        "code": -32001,
    }
    with pytest.raises(Exception) as refused:  # noqa: B017 - the SDK wraps it in task groups
        async with connect(served.url, token):
            pass
    error = innermost(refused.value)
    assert isinstance(error, MCPError)
    assert error.message == "invalid or revoked token"


async def test_a_reviewers_token_reads_but_never_proposes(served):
    token = served.user_token("reviewer")
    async with connect(served.url, token) as client:
        assert await names(client) == READ_TOOLS
        result = await client.call_tool("script_execute", {"language": "python", "code": "1"})
        assert result.is_error is True
        assert "only agent tokens can propose actions" in text_of(result)
        capabilities = await client.call_tool("list_capabilities", {})
    assert capabilities.structured_content["reviewer"] is True


async def test_a_long_run_can_be_read_and_cancelled(served):
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    progress = Progress()
    async with connect(served.url, served.server.token) as client:
        running = await client.call_tool(
            "script_execute",
            {"language": "python", "code": code, "wait_seconds": 3},
            progress_callback=progress,
        )
        assert running.is_error is False
        assert running.structured_content["outcome"] == "running"
        assert "".join(progress.messages[1:]) == "started\n"
        execution_id = running.structured_content["execution"]["id"]
        cancelled = await client.call_tool("cancel_execution", {"execution_id": execution_id})
        assert cancelled.is_error is False, text_of(cancelled)
        for _ in range(100):
            read = await client.call_tool("get_execution", {"execution_id": execution_id})
            if read.structured_content["execution"]["status"] == "cancelled":
                break
            await asyncio.sleep(0.2)
        pk = running.structured_content["proposal_id"]
        final = await client.call_tool("get_proposal", {"proposal_id": pk, "wait_seconds": 0})
    assert read.structured_content["execution"]["stdout"] == "started\n"
    assert final.is_error is True
    assert final.structured_content["outcome"] == "cancelled"


async def test_a_sandbox_session_keeps_its_state_between_executes(served):
    async with connect(served.url, served.server.token) as client:
        created = await client.call_tool("sandbox_create", {})
        session = created.structured_content["sandbox"]
        assert session["status"] == "active", text_of(created)
        first = await client.call_tool(
            "sandbox_execute", {"session_id": session["id"], "code": "x = 41"}
        )
        assert first.is_error is False, text_of(first)
        second = await client.call_tool(
            "sandbox_execute", {"session_id": session["id"], "code": "print(x + 1)"}
        )
        listed = await client.call_tool("sandbox_list", {})
        ended = await client.call_tool("sandbox_destroy", {"session_id": session["id"]})
        after = await client.call_tool(
            "sandbox_execute", {"session_id": session["id"], "code": "print(x)"}
        )
    assert second.structured_content["execution"]["stdout"] == "42\n"
    assert session["id"] in [s["id"] for s in listed.structured_content["sandboxes"]]
    assert ended.structured_content["sandbox"]["status"] == "closed"
    assert after.is_error is True
    assert f"sandbox session {session['id']} is closed" in text_of(after)


async def test_the_handshake_era_protocol_works_as_well(served):
    progress = Progress()
    async with connect(served.url, served.server.token, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        assert "script_execute" in await names(client)
        result = await client.call_tool(
            "script_execute",
            {"language": "python", "code": "print('hello')"},
            progress_callback=progress,
        )
    assert result.structured_content["execution"]["stdout"] == "hello\n"
    assert "".join(progress.messages[1:]) == "hello\n"
