"""``airlock_sdk.openai_agents`` with the real OpenAI Agents SDK: its page's example, a
reviewer approving and rejecting through the API, and a failing tool run with ``run_sync``.
The model is the Agents SDK's own ``ScriptedModel`` (no network): it calls the tool, then
answers with what the tool answered it."""

from __future__ import annotations

import json

import pytest

from tests.sdk_frameworks.conftest import example, run_program
from tests.serving import decide_when_pending

# The one substitution into the page's example: its model becomes a scripted one.
MODEL_LINE = 'MODEL = "gpt-5-mini"\n'
SCRIPTED = """
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

MODEL = ScriptedModel([
    [function_call("refund", {"customer": "cus_42", "amount": 30.5}, call_id="call_1")],
    ModelStep.respond(lambda call: [assistant_message(f"model got: {call.input[-1]['output']}")]),
])
"""
# No traces sent to OpenAI.
ENV = {"OPENAI_AGENTS_DISABLE_TRACING": "1"}


@pytest.fixture(scope="module")
def program():
    code = example("openai-agents.md")
    assert MODEL_LINE in code
    return code.replace(MODEL_LINE, SCRIPTED)


def refund_proposals(deployment) -> list[dict]:
    _, page = deployment.api("GET", "/api/v1/proposals?action=tool.call", token=deployment.reviewer)
    return [p for p in page["items"] if p["parameters"]["tool"] == "billing.refund"]


def test_the_example_runs_an_approved_call_once_and_reports_it(deployment, program):
    before = {p["id"] for p in refund_proposals(deployment)}
    reviewer = decide_when_pending(deployment, "billing.refund", "approve", "fine")
    done = run_program(deployment, program, env=ENV)
    reviewer.join()
    assert done.stdout.count("refunding 30.5 to cus_42") == 1
    assert "model got: {'refund_id': 're_123', 'amount': 30.5}" in done.stdout
    [proposal] = [p for p in refund_proposals(deployment) if p["id"] not in before]
    assert proposal["status"] == "approved"
    assert proposal["parameters"]["arguments"] == {"customer": "cus_42", "amount": 30.5}
    assert proposal["reason"] == "billing: Refund a customer."
    _, execution = deployment.api(
        "GET", f"/api/v1/executions/{proposal['execution_id']}", token=deployment.reviewer
    )
    assert execution["status"] == "succeeded"
    assert json.loads(execution["stdout"]) == {"refund_id": "re_123", "amount": 30.5}


def test_a_rejected_call_never_runs_and_the_model_gets_the_comment(deployment, program):
    reviewer = decide_when_pending(deployment, "billing.refund", "reject", "over the limit")
    done = run_program(deployment, program, env=ENV)
    reviewer.join()
    assert "refunding" not in done.stdout
    assert "model got: Not done: rejected in Airlock (reviewer: over the limit)." in done.stdout


def test_a_failing_tool_is_reported_failed_with_run_sync(deployment):
    code = """
import os
from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from airlock_sdk import Airlock
from airlock_sdk.openai_agents import run_sync

@function_tool(needs_approval=True)
def close_account(customer: str) -> str:
    raise ValueError(f"{customer} has an open invoice")

model = ScriptedModel([
    [function_call("close_account", {"customer": "cus_7"}, call_id="call_1")],
    ModelStep.respond(lambda call: [assistant_message(f"model got: {call.input[-1]['output']}")]),
])
agent = Agent(name="billing", tools=[close_account], model=model)
with Airlock(os.environ["AIRLOCK_URL"], os.environ["AIRLOCK_TOKEN"]) as airlock:
    print(run_sync(airlock, agent, "Close cus_7.", prefix="crm.").final_output)
"""
    reviewer = decide_when_pending(deployment, "crm.close_account", "approve", "ok")
    done = run_program(deployment, code, env=ENV)
    reviewer.join()
    assert "model got: An error occurred while running the tool" in done.stdout
    _, page = deployment.api("GET", "/api/v1/proposals?action=tool.call", token=deployment.reviewer)
    [proposal] = [p for p in page["items"] if p["parameters"]["tool"] == "crm.close_account"]
    _, execution = deployment.api(
        "GET", f"/api/v1/executions/{proposal['execution_id']}", token=deployment.reviewer
    )
    assert execution["status"] == "failed"
    assert "ValueError: cus_7 has an open invoice" in execution["stdout"]
