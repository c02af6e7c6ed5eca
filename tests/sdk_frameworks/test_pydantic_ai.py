"""``airlock_sdk.pydantic_ai`` with PydanticAI's real package: the guide's example run as
written, PydanticAI's ``FunctionModel`` in place of the model, while a reviewer decides."""

from __future__ import annotations

import json

from tests.sdk_frameworks.conftest import example, run_program
from tests.serving import decide_when_pending

# The model the example names, played by PydanticAI's FunctionModel: it calls the tool once,
# then answers with what came back (the tool's return value, or the denial) and its outcome.
MODEL = """
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel


def reply(messages, info):
    returned = [p for p in messages[-1].parts if p.part_kind == "tool-return"]
    if returned:
        return ModelResponse(parts=[TextPart(f"{returned[0].outcome}: {returned[0].content}")])
    return ModelResponse(parts=[ToolCallPart("refund", {"customer": "cus_42", "amount": 30.5})])


MODEL = FunctionModel(reply)
"""


def the_example() -> str:
    code = example("pydantic-ai.md")
    assert code.count('"openai:gpt-5.2"') == 1
    return MODEL + code.replace('"openai:gpt-5.2"', "MODEL")


def last_proposal(deployment, tool: str) -> dict:
    _, page = deployment.api("GET", "/api/v1/proposals?action=tool.call", token=deployment.reviewer)
    return max((p for p in page["items"] if p["parameters"]["tool"] == tool), key=lambda p: p["id"])


def execution(deployment, execution_id: int) -> dict:
    _, body = deployment.api("GET", f"/api/v1/executions/{execution_id}", token=deployment.reviewer)
    return body


def test_the_example_runs_an_approved_call_once_and_reports_it(deployment):
    reviewer = decide_when_pending(deployment, "billing.refund", "approve", "fine")
    done = run_program(deployment, the_example())
    reviewer.join()
    assert done.stdout.count("refunding 30.5 to cus_42") == 1
    assert "success: {'refund_id': 're_123', 'amount': 30.5}" in done.stdout
    proposal = last_proposal(deployment, "billing.refund")
    assert proposal["status"] == "approved"
    assert proposal["parameters"]["arguments"] == {"customer": "cus_42", "amount": 30.5}
    assert proposal["reason"] == "Refund a customer."
    ran = execution(deployment, proposal["execution_id"])
    assert (ran["status"], ran["backend"]) == ("succeeded", "agent")
    assert json.loads(ran["stdout"]) == {"refund_id": "re_123", "amount": 30.5}


def test_a_rejected_call_never_runs_and_the_model_reads_the_comment(deployment):
    reviewer = decide_when_pending(deployment, "billing.refund", "reject", "over the limit")
    done = run_program(deployment, the_example())
    reviewer.join()
    proposal = last_proposal(deployment, "billing.refund")
    assert proposal["status"] == "rejected" and proposal["execution_id"] is None
    assert "refunding" not in done.stdout
    assert (
        f"denied: Airlock: proposal #{proposal['id']} rejected: reviewer: over the limit"
        in done.stdout
    )


def test_decided_outside_a_run_with_the_sync_client_and_a_failure_reported(deployment):
    program = '''
import asyncio
import os

from pydantic_ai import Agent, DeferredToolRequests, Tool
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from airlock_sdk import Airlock
from airlock_sdk.pydantic_ai import AirlockApprovals


def reply(messages, info):
    if any(p.part_kind == "tool-return" for p in messages[-1].parts):
        return ModelResponse(parts=[TextPart("charged")])
    return ModelResponse(parts=[ToolCallPart("charge", {"amount": 5})])


def charge(amount: int) -> None:
    """Charge the card."""
    print("charging", amount)
    raise RuntimeError("card declined")


agent = Agent(
    FunctionModel(reply),
    tools=[Tool(charge, requires_approval=True)],
    output_type=[str, DeferredToolRequests],
)
with Airlock(os.environ["AIRLOCK_URL"], os.environ["AIRLOCK_TOKEN"]) as airlock:
    approvals = AirlockApprovals(airlock, prefix="billing.", reason="monthly charge")
    result = agent.run_sync("Charge 5.")
    answers = asyncio.run(approvals.decide(result.output))
    print("answered by", list(answers.answered_by.values()))
    try:
        agent.run_sync(
            message_history=result.all_messages(),
            deferred_tool_results=answers,
            capabilities=[approvals],
        )
    except RuntimeError as exc:
        print("raised:", exc)
'''
    reviewer = decide_when_pending(deployment, "billing.charge", "approve")
    done = run_program(deployment, program)
    reviewer.join()
    assert "answered by ['reviewer']" in done.stdout
    assert done.stdout.count("charging 5") == 1 and "raised: card declined" in done.stdout
    proposal = last_proposal(deployment, "billing.charge")
    assert proposal["reason"] == "monthly charge"
    ran = execution(deployment, proposal["execution_id"])
    assert (ran["status"], ran["stdout"]) == ("failed", "RuntimeError: card declined")
