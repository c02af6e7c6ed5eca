"""An agent takes back a proposal over MCP (``withdraw``), and proposals the server refuses
for now (429: too many pending, too fast; 423: paused) are tool errors that say so."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.mcp.conftest import ONE_REVIEWER, Served, connect, text_of


async def pending_script(client, reason: str) -> int:
    made = await client.call_tool(
        "script_execute",
        {"language": "python", "code": ONE_REVIEWER, "reason": reason, "wait_seconds": 0},
    )
    assert made.structured_content["outcome"] == "pending", text_of(made)
    return made.structured_content["proposal_id"]


async def test_an_agent_withdraws_its_pending_proposal_and_it_reads_as_final(served):
    async with connect(served.url, served.server.token) as client:
        pk = await pending_script(client, "mcp withdrawn")
        withdrawn = await client.call_tool(
            "withdraw", {"proposal_id": pk, "reason": "the task changed"}
        )
        assert withdrawn.is_error is False, text_of(withdrawn)
        assert text_of(withdrawn) == (
            f"Proposal {pk} (python: import os) is withdrawn (the task changed); nothing runs."
        )
        assert withdrawn.structured_content["outcome"] == "withdrawn"
        assert withdrawn.structured_content["proposal"]["withdraw_reason"] == "the task changed"
        read = await client.call_tool("get_proposal", {"proposal_id": pk, "wait_seconds": 5})
        twice = await client.call_tool("withdraw", {"proposal_id": pk})
    assert read.is_error is True  # final, like expired: nothing will run
    assert text_of(read) == f"Proposal {pk} (python: import os) was withdrawn: the task changed."
    assert read.structured_content["outcome"] == "withdrawn"
    assert twice.is_error is True
    assert text_of(twice) == f"proposal {pk} is withdrawn: only a pending one can be withdrawn"


async def test_only_the_proposing_agent_sees_and_may_withdraw(served):
    async with connect(served.url, served.server.token) as client:
        pk = await pending_script(client, "mcp not theirs")
    other = served.new_agent("mcp-other", "script.execute")
    reviewer = served.user_token("reviewer")
    for token in (other, reviewer):
        async with connect(served.url, token) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            refused = await client.call_tool("withdraw", {"proposal_id": pk})
        assert ("withdraw" in listed) is (token == other)  # agents only
        assert refused.is_error is True
        assert text_of(refused) == f"proposal {pk} does not exist or is not visible to you"
    _, proposal = served.server.api("GET", f"/api/v1/proposals/{pk}", token=reviewer)
    assert proposal["status"] == "pending"


async def test_a_call_waiting_on_a_proposal_ends_when_it_is_withdrawn(served):
    async with connect(served.url, served.server.token) as client:
        pk = await pending_script(client, "mcp waited on")
        waiting = asyncio.create_task(
            client.call_tool("get_proposal", {"proposal_id": pk, "wait_seconds": 60})
        )
        await asyncio.sleep(0.5)
        started = time.monotonic()
        status, _ = await asyncio.to_thread(
            served.server.api, "POST", f"/api/v1/proposals/{pk}/withdraw", {"reason": "moot"}
        )
        assert status == 200
        ended = await asyncio.wait_for(waiting, 30)
    assert time.monotonic() - started < 10
    assert ended.is_error is True and text_of(ended).endswith("was withdrawn: moot.")


@pytest.fixture(scope="module")
def limited(served: Served):
    """mcp-queue may have one proposal pending; mcp-paused is paused."""
    tokens = {
        name: served.new_agent(name, "script.execute") for name in ("mcp-queue", "mcp-paused")
    }
    overrides = {"mcp-queue": {"max_pending": 1}}
    served.manage(
        "shell",
        "-c",
        f"from tests.conftest import use_policy; use_policy(agent_overrides={overrides!r})",
    )
    served.manage("agents", "pause", "mcp-paused", "--reason", "runaway loop")
    yield tokens
    served.manage("shell", "-c", "from tests.conftest import use_policy; use_policy()")


async def test_a_refused_proposal_is_a_tool_error_with_its_type_and_the_wait(served, limited):
    async with connect(served.url, limited["mcp-queue"]) as client:
        await pending_script(client, "mcp first of one")
        full = await client.call_tool(
            "script_execute", {"language": "python", "code": "print(2)", "wait_seconds": 0}
        )
    assert full.is_error is True
    error = full.structured_content["error"]
    assert error["type"] == "too_many_pending" and 1 <= error["retry_after"] <= 60
    assert text_of(full) == (
        "too_many_pending: agent mcp-queue has 1 proposals waiting for review, its limit "
        "(max_pending 1); withdraw some or wait for decisions; "
        f"try again in {error['retry_after']} s"
    )
    async with connect(served.url, limited["mcp-paused"]) as client:
        paused = await client.call_tool("script_execute", {"language": "python", "code": "1"})
    assert paused.is_error is True
    assert paused.structured_content["error"]["type"] == "agent_paused"
    assert paused.structured_content["error"]["retry_after"] is None
    assert text_of(paused).startswith("agent_paused: agent mcp-paused is paused since ")
    assert text_of(paused).endswith("(runaway loop); an admin must resume it; do not retry")
