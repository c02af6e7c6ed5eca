"""What a tool call answers: structured content for programs, a summary for the model.

The structured content of a proposing call (and of ``get_proposal``) is
``{"outcome", "proposal_id", "proposal", "execution", "result"}``: ``proposal``
and ``execution`` are the objects ``GET /api/v1/proposals/{id}`` and
``GET /api/v1/executions/{id}`` answer, and ``result`` (once the run ended)
the one ``?until=finished`` carries inline, so the result contract (stdout,
stderr, exit code, truncated, backend, provenance) reads the same over MCP
as over REST. An outcome that is not a success (denied, rejected, expired,
withdrawn, failed) is a tool error, with the reason or the reviewer's comment
in its text.
"""

from __future__ import annotations

import json
import math
from typing import Any

import mcp_types as types
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.utils.encoders import JSONEncoder

from approvals.agents.api import result_of
from approvals.choices import DecisionKind, ProposalStatus
from executions.choices import TERMINAL, ExecutionStatus

# Decided against (or taken back): nothing will run. A tool error, with the reason.
ENDED = (
    ProposalStatus.DENIED,
    ProposalStatus.REJECTED,
    ProposalStatus.EXPIRED,
    ProposalStatus.WITHDRAWN,
)
STREAM_TAIL_CHARS = 4000  # of stdout and stderr in the summary; the structured content has all


def jsonable(data: Any) -> Any:
    """``data`` as plain JSON values (the serializers leave datetimes in provenance)."""
    return json.loads(json.dumps(data, cls=JSONEncoder))


def answer(text: str, structured: dict | None = None, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=jsonable(structured) if structured is not None else None,
        is_error=error,
    )


def tool_error(message: str) -> types.CallToolResult:
    return answer(message, error=True)


def outcome(proposal: dict, execution: dict | None, waited: float | None = None):
    """The answer about a proposal: finished, refused, or still on its way after ``waited`` s."""
    structured = {
        "outcome": _outcome_word(proposal, execution),
        "proposal_id": proposal["id"],
        "proposal": proposal,
        "execution": execution,
        # the shape ?until=finished answers with over REST (and the SDK reads)
        "result": result_of(execution) if execution and execution["status"] in TERMINAL else None,
    }
    if proposal["status"] in ENDED:
        return answer(refusal_text(proposal), structured, error=True)
    if execution is None or execution["status"] not in TERMINAL:
        return answer(still_waiting_text(proposal, execution, waited), structured)
    failed = execution["status"] != ExecutionStatus.SUCCEEDED
    return answer(finished_text(proposal, execution), structured, error=failed)


def _outcome_word(proposal: dict, execution: dict | None) -> str:
    if execution is not None:
        return execution["status"]
    return proposal["status"]


def pending_line(proposal: dict) -> str:
    """``proposal 12: pending review (2 of 2 approvals needed, expires in 58 min)``."""
    return f"proposal {proposal['id']}: {review_state(proposal)}"


def review_state(proposal: dict) -> str:
    needed = f"{proposal['approvals_remaining']} of {proposal['required_approvals']}"
    return f"pending review ({needed} approvals needed, {expires_in(proposal['expires_at'])})"


def expires_in(expires_at: str | None) -> str:
    moment = parse_datetime(expires_at) if expires_at else None
    if moment is None:
        return "no expiry"
    minutes = math.floor((moment - timezone.now()).total_seconds() / 60)
    return f"expires in {minutes} min" if minutes >= 1 else "expires in less than a minute"


def approved_line(proposal: dict, then: str = "queued") -> str:
    approvers = [d["reviewer"] for d in proposal["decisions"] if d["kind"] == DecisionKind.APPROVE]
    by = f"by {', '.join(approvers)}" if approvers else "by policy"
    return f"approved {by}; execution {proposal['execution_id']} {then}"


def refusal_text(proposal: dict) -> str:
    head = f"Proposal {proposal['id']} ({proposal['summary']})"
    status = proposal["status"]
    if status == ProposalStatus.DENIED:
        return f"{head} was denied by policy: {proposal['decision_path'].get('reason', '')}"
    if status == ProposalStatus.EXPIRED:
        return f"{head} expired: no reviewer decided before the review timeout."
    if status == ProposalStatus.WITHDRAWN:
        return f"{head} was withdrawn: {proposal.get('withdraw_reason') or 'no reason given'}."
    rejection = next(
        (d for d in reversed(proposal["decisions"]) if d["kind"] == DecisionKind.REJECT), None
    )
    if rejection is None:
        return f"{head} was rejected."
    comment = rejection["comment"] or "(no comment)"
    return f"{head} was rejected by {rejection['reviewer']}: {comment}"


def withdrawn_answer(proposal: dict) -> types.CallToolResult:
    """``withdraw``: the proposal taken back (what the caller asked for: not an error)."""
    why = proposal.get("withdraw_reason") or "no reason given"
    text = f"Proposal {proposal['id']} ({proposal['summary']}) is withdrawn ({why}); nothing runs."
    structured = {
        "outcome": proposal["status"],
        "proposal_id": proposal["id"],
        "proposal": proposal,
    }
    return answer(text, structured)


def still_waiting_text(
    proposal: dict, execution: dict | None, waited: float | None, then: str = ""
) -> str:
    """What a call says of a proposal on its way; ``then``: how to wait again (by default,
    ``get_proposal``)."""
    if proposal["status"] == ProposalStatus.PENDING:
        where = review_state(proposal)
    else:
        state = execution["status"] if execution else proposal["execution_status"]
        where = f"approved; execution {proposal['execution_id']} is {state}"
    after = f" after {waited:g} s" if waited is not None else ""
    then = then or (
        f"Call get_proposal with proposal_id {proposal['id']} to wait again or read the result."
    )
    return (
        f"Proposal {proposal['id']} ({proposal['summary']}) is not finished{after}: {where}. {then}"
    )


def finished_text(proposal: dict, execution: dict) -> str:
    facts = [f"exit code {execution['exit_code']}"]
    if execution["duration_ms"] is not None:
        facts.append(f"{execution['duration_ms']} ms")
    facts.append(f"backend {execution['backend'] or 'none'}")
    lines = [
        f"{proposal['action']} {execution['status']} ({', '.join(facts)}; "
        f"proposal {proposal['id']}, execution {execution['id']})."
    ]
    if execution["error"]:
        lines.append(f"error: {execution['error']}")
    for stream in ("stdout", "stderr"):
        if execution[stream]:
            lines.append(f"{stream}:\n{_tail(execution[stream])}")
    if execution["truncated"]:
        lines.append("(output past the cap was cut)")
    return "\n".join(lines)


def _tail(text: str) -> str:
    if len(text) <= STREAM_TAIL_CHARS:
        return text.rstrip("\n")
    return "…" + text[-STREAM_TAIL_CHARS:].rstrip("\n")


def execution_answer(execution: dict) -> types.CallToolResult:
    """``get_execution``: the execution's result contract, whatever its status."""
    summary = f"execution {execution['id']} ({execution['action']}) is {execution['status']}" + (
        f", exit code {execution['exit_code']}" if execution["exit_code"] is not None else ""
    )
    streams = [f"{s}:\n{_tail(execution[s])}" for s in ("stdout", "stderr") if execution[s]]
    return answer("\n".join([summary, *streams]), {"execution": execution})
