"""``airlock_sdk.langgraph`` with LangGraph's real package against a running ``serve``: the
page's examples (a tool node, the interrupt bridge), a rejection the model reads, async
runs, and interrupts waited on again. The models are langchain_core's scripted ones."""

from __future__ import annotations

import json

from tests.sdk_frameworks.conftest import example, run_program
from tests.serving import decide_when_pending


def _tool_call(deployment, tool: str, **match) -> dict:
    _, page = deployment.api("GET", "/api/v1/proposals?action=tool.call", token=deployment.reviewer)
    return next(
        p
        for p in page["items"]
        if p["parameters"]["tool"] == tool and all(p[k] == v for k, v in match.items())
    )


def _execution(deployment, proposal: dict) -> dict:
    _, execution = deployment.api(
        "GET", f"/api/v1/executions/{proposal['execution_id']}", token=deployment.reviewer
    )
    return execution


def test_the_pages_tool_node_runs_an_approved_call_and_reports_it(deployment):
    reviewer = decide_when_pending(deployment, "billing.refund", "approve", "ok")
    done = run_program(deployment, example("langgraph.md", 0))
    reviewer.join()
    assert done.stdout.splitlines() == [
        '{"refund_id": "re_123", "customer": "cus_42", "amount": 30.5}',
        "Done.",
    ]
    proposal = _tool_call(deployment, "billing.refund", reason="Refund a customer.")
    assert proposal["parameters"]["arguments"] == {"customer": "cus_42", "amount": 30.5}
    execution = _execution(deployment, proposal)
    assert execution["status"] == "succeeded"
    assert json.loads(execution["stdout"]) == {
        "refund_id": "re_123", "customer": "cus_42", "amount": 30.5,
    }  # fmt: skip


REJECTED_ASYNC = """
import asyncio, os

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

from airlock_sdk import Airlock, AsyncAirlock, NotDecided
from airlock_sdk.langgraph import requires_approval

ran = []


class Model(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):  # scripted: it knows its calls already
        return self


@tool
async def close_account(customer: str) -> str:
    \"\"\"Close a customer's account.\"\"\"
    ran.append(customer)
    return "closed"


async def main():
    async with AsyncAirlock(os.environ["AIRLOCK_URL"], os.environ["AIRLOCK_TOKEN"]) as airlock:
        call = {"name": "close_account", "id": "call_7", "args": {"customer": "cus_7"}}
        model = Model(responses=[AIMessage("", tool_calls=[call]), AIMessage("I could not.")])
        agent = create_react_agent(model, requires_approval(airlock, [close_account]))
        result = await agent.ainvoke({"messages": [HumanMessage("close cus_7")]})
        print(result["messages"][-2].status, result["messages"][-2].content)
    # A sync client serves async runs too (from a thread).
    with Airlock(os.environ["AIRLOCK_URL"], os.environ["AIRLOCK_TOKEN"]) as airlock:
        hasty = requires_approval(
            airlock, close_account, prefix="slow.", timeout=1, raise_refusals=True
        )
        try:
            await hasty.ainvoke({"customer": "cus_8"})
        except NotDecided as exc:
            print("not decided", exc.proposal.id)
    print("ran", ran)


asyncio.run(main())
"""


def test_a_rejection_is_the_tools_result_and_the_tool_never_runs(deployment):
    reviewer = decide_when_pending(deployment, "close_account", "reject", "not this one")
    done = run_program(deployment, REJECTED_ASYNC)
    reviewer.join()
    rejected = _tool_call(deployment, "close_account")
    first, second, ran = done.stdout.splitlines()
    assert first == (
        "error close_account was not called: rejected by a reviewer "
        f"(reviewer: not this one; proposal #{rejected['id']})"
    )
    assert ran == "ran []"  # neither call ran
    assert (rejected["status"], rejected["execution_id"]) == ("rejected", None)
    assert rejected["reason"] == "Close a customer's account."
    # Not decided in time (a sync client's wait, in an async run): raised as asked, and
    # the proposal taken back.
    late = _tool_call(deployment, "slow.close_account")
    assert second == f"not decided {late['id']}"
    _, late = deployment.api("GET", f"/api/v1/proposals/{late['id']}", token=deployment.reviewer)
    assert late["status"] == "withdrawn"
    assert late["withdraw_reason"] == "the LangGraph tool stopped waiting after 1 s"


def test_the_pages_interrupt_bridge_resumes_with_the_decision(deployment):
    reviewer = decide_when_pending(deployment, "billing.refund", "approve", "fine")
    done = run_program(deployment, example("langgraph.md", 1))
    reviewer.join()
    assert done.stdout == "refunded: re_123 (reviewer: fine)\n"
    proposal = _tool_call(deployment, "billing.refund", reason="the customer asked")
    execution = _execution(deployment, proposal)
    assert (execution["status"], json.loads(execution["stdout"])) == (
        "succeeded", {"refund_id": "re_123"},
    )  # fmt: skip


PARALLEL_INTERRUPTS = """
import asyncio, json, os, urllib.request
from typing import TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from airlock_sdk import AsyncAirlock, NotDecided
from airlock_sdk.langgraph import approval, aresume


def review(method, path, body=None):  # the reviewer, deciding once the test says so
    request = urllib.request.Request(
        os.environ["AIRLOCK_URL"] + path, method=method,
        data=json.dumps(body).encode() if body else None,
        headers={"Authorization": "Bearer " + os.environ["REVIEWER_TOKEN"],
                 "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as answer:
        return json.loads(answer.read())


class State(TypedDict, total=False):
    ship: dict
    refund: dict


def ship(state):
    return {"ship": interrupt("ship release 1.4?")}


def refund(state):
    return {"refund": approval("billing.refund", {"customer": "cus_5", "amount": 900})}


async def main():
    builder = StateGraph(State)
    builder.add_node("ship", ship)
    builder.add_node("refund", refund)
    builder.add_edge(START, "ship")
    builder.add_edge(START, "refund")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "release-1.4"}}
    async with AsyncAirlock(os.environ["AIRLOCK_URL"], os.environ["AIRLOCK_TOKEN"]) as airlock:
        state = await graph.ainvoke({}, config)
        try:
            await aresume(airlock, state, tool="release.ship", timeout=0)
        except NotDecided:
            pass
        page = review("GET", "/api/v1/proposals?status=pending&action=tool.call")
        first = {p["parameters"]["tool"]: p["id"] for p in page["items"]}
        review("POST", f"/api/v1/proposals/{first['release.ship']}/approve", {"comment": "go"})
        review("POST", f"/api/v1/proposals/{first['billing.refund']}/reject", {"comment": "no"})
        command = await aresume(airlock, await graph.aget_state(config), tool="release.ship")
        state = await graph.ainvoke(command, config)
        print(json.dumps({"first": first, "ship": state["ship"], "refund": state["refund"]}))
        print(await aresume(airlock, state))


asyncio.run(main())
"""


def test_interrupts_are_proposed_together_and_found_again_when_waited_on_anew(deployment):
    done = run_program(deployment, PARALLEL_INTERRUPTS, env={"REVIEWER_TOKEN": deployment.reviewer})
    answer, after = done.stdout.splitlines()
    assert after == "None"  # nothing waits any more
    got = json.loads(answer)
    ship, refund = got["first"]["release.ship"], got["first"]["billing.refund"]
    # The second wait found the first wait's proposals: each decision is of one of them.
    assert got["ship"] == {
        "approved": True, "status": "approved", "reason": "reviewer: go",
        "proposal_id": ship, "execution_id": None,
    }  # fmt: skip
    assert got["refund"] == {
        "approved": False, "status": "rejected", "reason": "reviewer: no",
        "proposal_id": refund, "execution_id": None,
    }  # fmt: skip
    shipped = _tool_call(deployment, "release.ship")
    assert shipped["id"] == ship
    assert shipped["parameters"]["arguments"] == {"value": "ship release 1.4?"}
    # An interrupt of its own: resume reported its approval when it gave it.
    assert _execution(deployment, shipped)["status"] == "succeeded"
