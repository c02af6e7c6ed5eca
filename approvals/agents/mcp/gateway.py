"""Upstream servers' tools on Airlock's ``/mcp``: listed as ``<server>__<tool>``, each call a
``tool.call`` proposal for ``<server>.<tool>``, made upstream only once approved.

A tool lists with the upstream's description, input schema, output schema and
annotations; its input schema gains Airlock's envelope (``reason``,
``urgency``, ``idempotency_key``, ``wait_seconds``) wherever the upstream has
no argument of that name (which then passes through untouched). A call is
checked against the upstream's schema, proposed, and waited on as Airlock's
own tools are (progress notifications included); once approved, the
execution is taken for the gateway (``executions.services.carry_out``: at
most once, whoever asks again) and the approved arguments go upstream. The
upstream's answer comes back unchanged and is kept as the execution's output;
Airlock's own answers (denied, rejected, withdrawn, upstream down) are tool
errors whose ``_meta["airlock"]`` holds the proposal's id and status. A call
whose ``wait_seconds`` run out before a decision withdraws its proposal: the
upstream would be called only for a caller that waits, so a reviewer must not
approve a call nobody waits for (a decision that lands meanwhile stands). A
call repeated with the same ``idempotency_key`` after its approval answers
what the upstream answered the first time, or makes the call if nobody has.
A proposal refused for now (429, 423) is a tool error that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import jsonschema
import mcp_types as types

from approvals.agents.api import proposal_data
from approvals.agents.mcp import calls, results
from approvals.agents.mcp.auth import Principal
from approvals.agents.mcp.context import Call
from approvals.agents.mcp.db import on_thread
from approvals.agents.mcp.schema import object_schema
from approvals.agents.mcp.tools import EnvelopeArguments
from approvals.choices import ProposalStatus
from approvals.core import withdrawal
from approvals.core.services import ProposalError
from approvals.gateway import connections
from approvals.gateway.connections import UpstreamDown, split
from executions import services as executions
from executions.actions.tools import is_tool_name
from executions.choices import ExecutionStatus
from executions.models import Execution
from infrastructure import tracing

log = logging.getLogger(__name__)

CARRIER = "gateway"  # the execution's backend once the gateway carries it out
ENVELOPE = ("reason", "urgency", "idempotency_key", "wait_seconds")
AGAIN = (
    "The upstream was not called. To propose the call anew, call this tool again with a "
    "longer wait_seconds (and a new idempotency_key, if you gave one)."
)


def policy_name(server: str, tool: str) -> str:
    """The name policy, capabilities and reviewers see: ``github.merge_pull_request``."""
    return f"{server}.{tool}"


def _grants(principal: Principal, name: str) -> bool:
    agent = principal.agent
    return agent is not None and agent.capability_for("tool.call", name) is not None


async def listed_for(principal: Principal) -> list[types.Tool]:
    """The upstreams' tools this caller may propose; an upstream that is down lists none."""
    if principal.agent is None or not principal.agent.may_propose("tool.call"):
        return []
    pool = connections.pool()
    found = await on_thread(connections.targets)()
    pool.keep_current(found)
    listings = await asyncio.gather(
        *(pool.connection(target).list_tools() for target in found), return_exceptions=True
    )
    pool.watch(on_thread(connections.targets))
    listed = []
    for target, tools in zip(found, listings, strict=True):
        if isinstance(tools, BaseException):
            log.warning(
                "upstream %s lists no tools: %s", target.name, getattr(tools, "message", tools)
            )
            continue
        for tool in tools:
            name = policy_name(target.name, tool.name)
            if is_tool_name(name) and _grants(principal, name):
                listed.append(_as_listed(target.name, tool))
    return listed


def _as_listed(server: str, tool: types.Tool) -> types.Tool:
    name = policy_name(server, tool.name)
    how = (
        f"[Airlock: calling this proposes the tool call `{name}`; policy approves it at once, "
        "denies it, or holds it for a person, and the upstream is called only once it is "
        "approved. Give a reason reviewers can judge and an idempotency_key whenever you "
        "might retry: calling again with the same key returns the first call's answer.]"
    )
    return tool.model_copy(
        update={
            "name": f"{server}{connections.SEPARATOR}{tool.name}",
            "description": f"{tool.description}\n\n{how}" if tool.description else how,
            "input_schema": with_envelope(tool.input_schema),
        }
    )


def _envelope_names(schema: dict) -> list[str]:
    taken = set((schema.get("properties") or {}).keys())
    return [name for name in ENVELOPE if name not in taken]


def with_envelope(schema: dict[str, Any]) -> dict[str, Any]:
    """The upstream's input schema, with the envelope's arguments it has no name for."""
    envelope = object_schema(EnvelopeArguments)["properties"]
    properties = dict(schema.get("properties") or {})
    for name in _envelope_names(schema):
        properties[name] = envelope[name]
    if "wait_seconds" in _envelope_names(schema):
        properties["wait_seconds"] = {
            **envelope["wait_seconds"],
            "description": "Seconds this call may wait for the decision. When they run out, "
            "the proposal is withdrawn (nobody waits for it any more) and the call is a tool "
            "error that says so: call again with a longer wait to propose it anew.",
        }
    return {**schema, "type": "object", "properties": properties}


async def call(call: Call, name: str, arguments: dict) -> types.CallToolResult:
    """Propose the call of upstream tool ``name``; call it once approved; answer as it did."""
    try:
        return await _call(call, name, arguments)
    except calls.ToolError as exc:
        return exc.answer()
    except UpstreamDown as exc:
        return results.tool_error(exc.message)


async def _call(call: Call, name: str, arguments: dict) -> types.CallToolResult:
    agent = call.principal.agent
    if agent is None:
        raise calls.ToolError(
            f"only agent tokens can call tools; {call.principal.label} is not an agent"
        )
    server, tool = split(name) or ("", "")
    target = next((t for t in await on_thread(connections.targets)() if t.name == server), None)
    if target is None:
        raise calls.ToolError(f"unknown tool {name!r}; tools/list shows yours")
    pool = connections.pool()
    connection = pool.connection(target)
    pool.watch(on_thread(connections.targets))
    upstream_tool = next((t for t in await connection.list_tools() if t.name == tool), None)
    if upstream_tool is None:
        raise calls.ToolError(f"upstream {server} has no tool {tool!r}; tools/list shows yours")
    envelope_names = _envelope_names(upstream_tool.input_schema)
    envelope = calls.validated(
        EnvelopeArguments, {k: v for k, v in arguments.items() if k in envelope_names}
    )
    passed = {k: v for k, v in arguments.items() if k not in envelope_names}
    _check(upstream_tool.input_schema, passed)
    parameters = {"tool": policy_name(server, tool), "arguments": passed}
    payload = calls._payload("tool.call", parameters, envelope)
    wait = envelope["wait_seconds"]
    deadline = asyncio.get_running_loop().time() + wait
    proposal, execution = await _propose(call.principal, payload, server)
    if proposal["status"] == ProposalStatus.PENDING:
        proposal = await calls._await_decision(call, proposal, deadline)
        if proposal["status"] == ProposalStatus.PENDING:
            proposal = await _stop_waiting(call.principal, proposal["id"], wait)
        if proposal["status"] == ProposalStatus.APPROVED:
            execution = await _take(proposal["execution_id"], server)
    if proposal["status"] == ProposalStatus.WITHDRAWN:
        return _airlock_answer(f"{results.refusal_text(proposal)} {AGAIN}", proposal)
    if proposal["status"] != ProposalStatus.APPROVED:
        return _airlock_answer(results.refusal_text(proposal), proposal)
    if execution is None:
        return await _answered_before(proposal)
    await call.progress.say(results.approved_line(proposal, f"calls {server}.{tool} upstream"))
    approved = execution.to_run()[0]["arguments"]  # what was approved, as sent (unsealed)
    try:
        with tracing.span("gateway.call", server=server, tool=tool, execution_id=execution.pk):
            result = await connection.call(tool, approved)
    except UpstreamDown as exc:
        await _report(execution, False, {"error": exc.message}, exc.message)
        raise
    kept = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    await _report(execution, not result.is_error, kept, f"upstream {server} answered with an error")
    return result


def _check(schema: dict, arguments: dict) -> None:
    """Refuse, before anything is proposed, arguments the upstream's schema refuses."""
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    except jsonschema.SchemaError:
        return  # the upstream's own schema is broken: let it judge its arguments
    if errors:
        said = "; ".join(
            f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message}" for e in errors[:5]
        )
        raise calls.ToolError(f"invalid arguments: {said}")


def _airlock_answer(text: str, proposal: dict) -> types.CallToolResult:
    """Airlock's answer on an upstream's tool: an error (the tool did not run), ids in ``_meta``."""
    meta = {"airlock": {"proposal_id": proposal["id"], "status": proposal["status"]}}
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True, _meta=meta)


@on_thread
def _stop_waiting(principal: Principal, pk: int, waited: float) -> dict:
    """Withdraw the proposal nobody waits for any more; as it then is (withdrawn, or
    decided meanwhile: a decision that landed first stands, and an approval is carried out)."""
    reason = f"the gateway stopped waiting after {waited:g} s"
    with contextlib.suppress(ProposalError):  # decided between the last read and now
        withdrawal.withdraw(principal.agent, pk, reason)
    return dict(proposal_data(principal.user, pk))


def _taken(execution_id: int, server: str) -> Execution | None:
    return executions.carry_out(execution_id, CARRIER, upstream=server)


_take = on_thread(_taken)


@on_thread
def _propose(principal: Principal, payload: dict, server: str) -> tuple[dict, Execution | None]:
    """Submit the call; the proposal as it stands and, when policy approved it at once, its
    execution taken for the gateway. One trip to the database's thread, for the hot path."""
    submission = calls.submitted(principal.agent, payload)
    proposal = dict(proposal_data(principal.user, submission.proposal.pk))
    if proposal["parameters"] != payload["parameters"]:  # a key used before, for another call
        raise calls.ToolError(
            f"idempotency key {payload.get('idempotency_key')!r} was already used for proposal "
            f"{proposal['id']}, a call of {proposal['summary']}; use a new key for a new call"
        )
    if proposal["status"] != ProposalStatus.APPROVED:
        return proposal, None
    return proposal, _taken(proposal["execution_id"], server)


@on_thread
def _report(execution: Execution, succeeded: bool, output: object, error: str) -> None:
    try:
        executions.report(
            execution.pk, execution.requested_by, succeeded, output, carrier=CARRIER, error=error
        )
    except executions.ReportRefused as exc:  # cancelled or lost meanwhile: the trail says so
        log.warning("the gateway's report of execution %s was refused: %s", execution.pk, exc)


async def _answered_before(proposal: dict) -> types.CallToolResult:
    """The answer to a call made again after its approval: the upstream's first answer."""
    execution = await on_thread(Execution.objects.get)(pk=proposal["execution_id"])
    if execution.backend != CARRIER or not execution.is_terminal:
        state = "being called upstream" if execution.backend == CARRIER else execution.status
        text = (
            f"proposal {proposal['id']} was approved and its execution {execution.pk} is "
            f"{state}; get_execution {execution.pk} reads its outcome"
        )
        return _airlock_answer(text, proposal)
    kept = await on_thread(execution.output_text)("stdout")  # what the report kept
    try:
        return types.CallToolResult.model_validate(json.loads(kept))
    except ValueError:
        return types.CallToolResult(
            content=[types.TextContent(text=kept)],
            is_error=execution.status != ExecutionStatus.SUCCEEDED,
        )
