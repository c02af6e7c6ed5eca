"""What the tools do: propose and wait like a function call; read, cancel, manage sessions.

A proposing call submits through ``approvals.core.services.submit`` (which
validates, scores, decides and audits) and then waits without a thread or a
connection: for the decision on the proposal watcher of long-polls, then for
the run on the execution's output stream. Progress notifications say what
it waits for and then carry the output. The proposal is committed before
any waiting, so a client that goes away loses nothing: the same
idempotency key finds the proposal again, and ``get_proposal`` waits anew.
"""

from __future__ import annotations

import asyncio
from functools import cache

import mcp_types as types
from rest_framework import serializers

from approvals.agents.api import SandboxSerializer, capabilities, proposal_data, visible_sessions
from approvals.agents.mcp import results
from approvals.agents.mcp.auth import Principal
from approvals.agents.mcp.context import HEARTBEAT_SECONDS, Call
from approvals.agents.mcp.db import on_thread
from approvals.agents.mcp.follow import OutputFollower
from approvals.agents.mcp.tools import (
    EnvelopeArguments,
    ExecutionArguments,
    NoArguments,
    ProposalArguments,
    SessionArguments,
    SessionCreateArguments,
    ToolDef,
    WithdrawArguments,
    action_tools,
)
from approvals.agents.waiting import fingerprint_of, watcher
from approvals.choices import ProposalStatus
from approvals.core import services, withdrawal
from approvals.guard.admission import Refused
from executions import services as executions
from executions import sessions
from executions.actions import ActionSpec
from executions.api import execution_data, visible_executions
from executions.models import SandboxSession
from infrastructure.rest.errors import ApiError
from infrastructure.rest.errors import _message as error_text

SESSION_START_SECONDS = 15
SESSION_POLL_SECONDS = 0.1


class ToolError(Exception):
    """A call that cannot be honoured; the message is what the model reads, ``structured``
    what a program reads (a refusal's type and Retry-After)."""

    def __init__(self, message: str, structured: dict | None = None):
        super().__init__(message)
        self.message = message
        self.structured = structured

    def answer(self) -> types.CallToolResult:
        return results.answer(self.message, self.structured, error=True)


async def run(call: Call, tool: ToolDef, arguments: dict) -> types.CallToolResult:
    """Answer a call; every refusal is a tool error with a precise message."""
    try:
        return await tool.run(call, arguments)
    except ToolError as exc:
        return exc.answer()
    except ApiError as exc:
        return results.tool_error(str(exc.detail))


@cache
def field_names(serializer_class: type[serializers.Serializer]) -> tuple[str, ...]:
    return tuple(serializer_class().fields)  # instantiating a serializer takes a while


def validated(serializer_class: type[serializers.Serializer], arguments: dict) -> dict:
    unknown = set(arguments) - set(field_names(serializer_class))
    if unknown:
        raise ToolError(_unknown(unknown, field_names(serializer_class)))
    serializer = serializer_class(data=arguments)
    if not serializer.is_valid():
        raise ToolError(f"invalid arguments: {error_text(serializer.errors)}")
    return dict(serializer.validated_data)


def _unknown(names: set[str], known) -> str:
    takes = ", ".join(known) or "no arguments"
    return f"unknown argument(s) {', '.join(sorted(names))}; this tool takes {takes}"


# --- proposing -----------------------------------------------------------------


async def propose(spec: ActionSpec, call: Call, arguments: dict) -> types.CallToolResult:
    """Submit ``spec`` with the call's arguments, then wait for its decision and run."""
    agent = call.principal.agent
    if agent is None:
        raise ToolError(
            f"only agent tokens can propose actions; {call.principal.label} is not an agent"
        )
    parameter_names = field_names(spec.serializer)
    envelope_names = field_names(EnvelopeArguments)
    unknown = set(arguments) - set(parameter_names) - set(envelope_names)
    if unknown:
        raise ToolError(_unknown(unknown, parameter_names + envelope_names))
    envelope = validated(
        EnvelopeArguments, {k: v for k, v in arguments.items() if k in envelope_names}
    )
    parameters = {k: v for k, v in arguments.items() if k in parameter_names}
    if spec.name == "sandbox.execute":
        await _usable_session(call.principal, spec, parameters)
    submission = await _submit(agent, _payload(spec.name, parameters, envelope))
    return await settle(call, submission.proposal.pk, envelope["wait_seconds"])


def _payload(action: str, parameters: dict, envelope: dict) -> dict:
    payload = {
        "action": action,
        "parameters": parameters,
        "reason": envelope["reason"],
        "urgency": envelope["urgency"],
    }
    if envelope.get("idempotency_key"):
        payload["idempotency_key"] = envelope["idempotency_key"]
    return payload


def submitted(agent, payload: dict) -> services.Submission:
    """Submit ``payload``, every refusal a ``ToolError`` (reads the database: on a thread)."""
    try:
        return services.submit(agent, payload)
    except serializers.ValidationError as exc:
        raise ToolError(f"invalid arguments: {error_text(exc.detail)}") from None
    except services.ProposalError as exc:
        raise ToolError(exc.message) from None
    except Refused as refusal:
        raise refused(refusal) from None


def refused(refusal: Refused) -> ToolError:
    """A proposal the agent may not make now (429, 423) as the tool error that says so: its
    type, and how long to wait (429) or that waiting will not help (423)."""
    if refusal.retry_after is not None:
        then = f"try again in {refusal.retry_after} s"
    else:
        then = "do not retry"  # paused: until an admin resumes the agent
    error = {"type": refusal.kind, "message": refusal.message, "retry_after": refusal.retry_after}
    return ToolError(f"{refusal.kind}: {refusal.message}; {then}", {"error": error})


_submit = on_thread(submitted)


@on_thread
def _usable_session(principal: Principal, spec: ActionSpec, parameters: dict) -> None:
    """The REST execute endpoint's check: the caller's own session, and still active."""
    try:
        session_id = spec.validate(parameters)["session_id"]  # as submit will read it
    except serializers.ValidationError:
        return  # submit says what is wrong with the parameters
    session = visible_sessions(principal.user).filter(pk=session_id).first()
    if session is None:
        raise ToolError(f"sandbox session {session_id} does not exist or is not yours")
    if session.status != SandboxSession.Status.ACTIVE:
        raise ToolError(f"sandbox session {session_id} is {session.status}; create a new session")


# --- waiting ---------------------------------------------------------------------


async def settle(call: Call, pk: int, wait: float) -> types.CallToolResult:
    """Wait up to ``wait`` seconds for proposal ``pk``'s decision and run; answer what is known."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    proposal = await _proposal(call.principal, pk)
    proposal = await _await_decision(call, proposal, deadline)
    if proposal["status"] != ProposalStatus.APPROVED:
        return results.outcome(proposal, None, waited=wait)
    await call.progress.say(results.approved_line(proposal))
    await _follow(call, proposal["execution_id"], deadline)
    proposal, execution = await _proposal_and_execution(call.principal, pk)
    return results.outcome(proposal, execution, waited=wait)


async def _await_decision(call: Call, proposal: dict, deadline: float) -> dict:
    loop = asyncio.get_running_loop()
    while proposal["status"] == ProposalStatus.PENDING:
        await call.progress.say_once(results.pending_line(proposal))
        left = deadline - loop.time()
        if left <= 0:
            break
        seen = fingerprint_of(proposal)
        await watcher().wait_for_change(proposal["id"], seen, min(left, HEARTBEAT_SECONDS))
        proposal = await _proposal(call.principal, proposal["id"])
    return proposal


async def _follow(call: Call, execution_id: int, deadline: float) -> bool:
    async def on_chunk(chunk: dict) -> None:
        prefix = "[stderr] " if chunk["stream"] == "stderr" else ""
        await call.progress.say(prefix + chunk["data"])

    return await OutputFollower(execution_id, on_chunk).follow(deadline)


@on_thread
def _proposal(principal: Principal, pk: int) -> dict:
    return dict(proposal_data(principal.user, pk))


@on_thread
def _proposal_and_execution(principal: Principal, pk: int) -> tuple[dict, dict]:
    proposal = dict(proposal_data(principal.user, pk))
    return proposal, _execution_data(principal, proposal["execution_id"])


@on_thread
def _execution(principal: Principal, pk: int) -> dict:
    return _execution_data(principal, pk)


def _execution_data(principal: Principal, pk: int) -> dict:
    return results.jsonable(execution_data(principal.user, pk))


def withdrawn(principal: Principal, pk: int, reason: str) -> dict:
    """The agent's pending proposal ``pk`` withdrawn, as the API answers it; a ``ToolError``
    if it is not the agent's (to others it does not exist) or no longer pending."""
    unknown = f"proposal {pk} does not exist or is not visible to you"
    if principal.agent is None:
        raise ToolError(unknown)
    try:
        withdrawal.withdraw(principal.agent, pk, reason)
    except services.ProposalError as exc:
        raise ToolError(unknown if exc.kind == "not_found" else exc.message) from None
    return dict(proposal_data(principal.user, pk))


# --- reading, withdrawing and cancelling -------------------------------------------------


async def get_proposal(call: Call, arguments: dict) -> types.CallToolResult:
    data = validated(ProposalArguments, arguments)
    return await settle(call, data["proposal_id"], data["wait_seconds"])


async def withdraw(call: Call, arguments: dict) -> types.CallToolResult:
    data = validated(WithdrawArguments, arguments)
    proposal = await on_thread(withdrawn)(call.principal, data["proposal_id"], data["reason"])
    return results.withdrawn_answer(proposal)


async def get_execution(call: Call, arguments: dict) -> types.CallToolResult:
    data = validated(ExecutionArguments, arguments)
    return results.execution_answer(await _execution(call.principal, data["execution_id"]))


async def cancel_execution(call: Call, arguments: dict) -> types.CallToolResult:
    data = validated(ExecutionArguments, arguments)
    return results.execution_answer(await _cancel(call.principal, data["execution_id"]))


@on_thread
def _cancel(principal: Principal, pk: int) -> dict:
    execution = visible_executions(principal.user).filter(pk=pk).first()
    if execution is None:
        raise ToolError(f"execution {pk} does not exist or is not visible to you")
    try:
        executions.request_cancel(pk, principal.label)
    except executions.ExecutionConflict as exc:
        raise ToolError(str(exc)) from None
    return _execution_data(principal, pk)


async def list_capabilities(call: Call, arguments: dict) -> types.CallToolResult:
    validated(NoArguments, arguments)
    data = await on_thread(capabilities)(call.principal.user)
    allowed = [a["name"] for a in data["actions"] if a["allowed"]]
    text = (
        f"{data['principal']} may propose: {', '.join(allowed) or 'nothing'}. "
        f"Sandbox: {data['sandbox']['backend']} (isolation {data['sandbox']['isolation']})."
    )
    return results.answer(text, data)


# --- sandbox sessions (no code runs: not proposals; every execute is one) -----------------


async def sandbox_create(call: Call, arguments: dict) -> types.CallToolResult:
    data = validated(SessionCreateArguments, arguments)
    _need(call.principal, "sandbox.create")
    session = await on_thread(sessions.start)(call.principal.label, data["language"])
    session = await _started(session.pk)
    return _session_answer(session, f"sandbox session {session['id']} is {session['status']}")


async def _started(pk: int) -> dict:
    """The session once a worker opened it (or gave up), or as it is after a while."""
    # Nothing is broadcast about sessions: read briefly, as the REST endpoint does.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SESSION_START_SECONDS
    while True:
        session = await _session(pk)
        if session["status"] != SandboxSession.Status.STARTING or loop.time() >= deadline:
            return session
        await asyncio.sleep(SESSION_POLL_SECONDS)


async def sandbox_list(call: Call, arguments: dict) -> types.CallToolResult:
    validated(NoArguments, arguments)
    _need(call.principal, "sandbox.list")
    listed = await _sessions(call.principal)
    active = [str(s["id"]) for s in listed if s["status"] == SandboxSession.Status.ACTIVE]
    text = f"{len(listed)} sandbox session(s); active: {', '.join(active) or 'none'}"
    return results.answer(text, {"sandboxes": listed})


async def sandbox_destroy(call: Call, arguments: dict) -> types.CallToolResult:
    data = validated(SessionArguments, arguments)
    _need(call.principal, "sandbox.destroy")
    session = await _destroy(call.principal, data["session_id"])
    return _session_answer(session, f"sandbox session {session['id']} is {session['status']}")


def _need(principal: Principal, capability: str) -> None:
    if principal.agent is None:
        raise ToolError("sandbox sessions belong to agents; use an agent token")
    if not principal.may(capability):
        raise ToolError(f"the agent has no capability for {capability}")


def _session_answer(session: dict, text: str) -> types.CallToolResult:
    if session["error"]:
        text += f": {session['error']}"
    return results.answer(text, {"sandbox": session})


@on_thread
def _session(pk: int) -> dict:
    return results.jsonable(SandboxSerializer(SandboxSession.objects.get(pk=pk)).data)


@on_thread
def _sessions(principal: Principal) -> list[dict]:
    listed = visible_sessions(principal.user).order_by("-created_at")[:200]
    return results.jsonable(SandboxSerializer(listed, many=True).data)


@on_thread
def _destroy(principal: Principal, pk: int) -> dict:
    session = visible_sessions(principal.user).filter(pk=pk).first()
    if session is None:
        raise ToolError(f"sandbox session {pk} does not exist or is not yours")
    return results.jsonable(SandboxSerializer(sessions.destroy(session, principal.label)).data)


# --- the catalog -------------------------------------------------------------------------


def all_tools() -> list[ToolDef]:
    def read(name, description, arguments, run, audience="reader", read_only=True):
        return ToolDef(name, description, arguments, run, audience, read_only=read_only)

    def session(name, description, arguments, run, capability, read_only=False):
        return ToolDef(name, description, arguments, run, "agent", capability, read_only)

    return [
        *action_tools(propose),
        session(
            "sandbox_create",
            "Create a persistent Python sandbox session: variables and imports survive between "
            "sandbox_execute calls. Returns the session id. No code runs, so no review.",
            SessionCreateArguments,
            sandbox_create,
            "sandbox.create",
        ),
        session(
            "sandbox_list",
            "List your sandbox sessions and their status.",
            NoArguments,
            sandbox_list,
            "sandbox.list",
            read_only=True,
        ),
        session(
            "sandbox_destroy",
            "End a sandbox session; its state is gone.",
            SessionArguments,
            sandbox_destroy,
            "sandbox.destroy",
        ),
        read(
            "get_proposal",
            "The state of a proposal (one an action tool made): waits up to wait_seconds for its "
            "decision and run, then answers as the action call would have: the result when it "
            "finished, a tool error when it was denied, rejected, expired, withdrawn or failed, "
            "or the status when it is still on its way.",
            ProposalArguments,
            get_proposal,
        ),
        ToolDef(
            "withdraw",
            "Withdraw a pending proposal of yours that you no longer need (the task changed, "
            "you stopped waiting): it becomes `withdrawn`, a final state, nothing runs and "
            "reviewers no longer see it waiting. Give a reason for the audit trail. Refused "
            "once it was decided.",
            WithdrawArguments,
            withdraw,
            "proposer",
        ),
        read(
            "get_execution",
            "An execution's result contract as it stands: status, stdout, stderr, exit code, "
            "duration, truncated, backend and provenance.",
            ExecutionArguments,
            get_execution,
        ),
        read(
            "cancel_execution",
            "Cancel a queued or running execution (of your own proposals).",
            ExecutionArguments,
            cancel_execution,
            read_only=False,
        ),
        read(
            "list_capabilities",
            "What this token may propose (capabilities and actions), and the sandbox in force.",
            NoArguments,
            list_capabilities,
            audience="anyone",
        ),
    ]
