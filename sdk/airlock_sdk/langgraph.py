"""LangGraph's tool calls and interrupts, decided in Airlock (the ``langgraph`` extra).

    from airlock_sdk.langgraph import requires_approval

    tools = requires_approval(airlock, [refund, lookup])   # then ToolNode(tools), as before

Each call of such a tool is first a ``tool.call`` proposal of that tool with the model's
arguments; it runs only once approved, and its outcome (its output, or its error) is
reported. A call that will not run (rejected, denied, expired, or not decided within
``timeout``, then withdrawn) comes back as the tool's result, an error the model reads,
or, with ``raise_refusals=True``, as the SDK's exception.

For graphs that stop for a person with ``interrupt``: ``approval(tool, arguments)`` in a
node asks for one, and ``resume(airlock, state)`` (``aresume``) proposes each pending
interrupt, waits for the decisions and gives the ``Command`` that resumes the graph with
them: each a ``Decision``.

Owns the tool wrapper (``AirlockTool``) and the interrupt bridge; imports LangGraph and
LangChain Core, which the rest of the SDK never does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, TypedDict, overload

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as as_tool
from langgraph.types import Command, Interrupt, interrupt

from airlock_sdk import flows
from airlock_sdk.client import Airlock, AsyncAirlock
from airlock_sdk.errors import Denied, Ended, Expired, NotDecided, Rejected
from airlock_sdk.types import Proposal

__all__ = ["AirlockTool", "Decision", "approval", "aresume", "requires_approval", "resume"]

INTERRUPT_TOOL = "langgraph.interrupt"  # the tool an interrupt not made by ``approval`` is


class AirlockTool(BaseTool):
    """``tool`` behind Airlock's approval, under its own name, description and schema.

    ``airlock_tool``: the tool's name in Airlock (policy rules, capabilities, reviewers'
    pages). Refusals are the tool's result unless ``raise_refusals``."""

    tool: BaseTool
    airlock: Any  # Airlock, or AsyncAirlock (async runs only)
    airlock_tool: str
    reason: str | None = None
    timeout: float = 3600
    raise_refusals: bool = False

    # The model, ToolNode and the callbacks see the tool itself.
    @property
    def tool_call_schema(self) -> Any:
        return self.tool.tool_call_schema

    def get_input_schema(self, config: Any = None) -> Any:
        return self.tool.get_input_schema(config)

    @property
    def func(self) -> Callable | None:  # read by ToolNode for the arguments it injects
        return getattr(self.tool, "func", None)

    @property
    def coroutine(self) -> Callable | None:
        return getattr(self.tool, "coroutine", None)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("AirlockTool runs through run and arun")

    def run(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(self.airlock, AsyncAirlock):
            raise TypeError(
                f"{self.name}: an AsyncAirlock answers async runs only (ainvoke, astream); "
                "give a sync graph an Airlock"
            )
        arguments, reason = self._proposed(tool_input)
        try:
            approved = _decided(self.airlock, self.airlock_tool, arguments, reason, self.timeout)
        except (Ended, NotDecided) as exc:
            return self._refused(exc, kwargs.get("tool_call_id"))
        try:
            value = self.tool.run(tool_input, *args, **kwargs)
        except Exception as exc:
            self.airlock.report(approved.execution_id, succeeded=False, output=_error(exc))
            raise
        self.airlock.report(approved.execution_id, **_outcome(value))
        return value

    async def arun(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        arguments, reason = self._proposed(tool_input)
        try:
            approved = await _adecided(
                self.airlock, self.airlock_tool, arguments, reason, self.timeout
            )
        except (Ended, NotDecided) as exc:
            return self._refused(exc, kwargs.get("tool_call_id"))
        try:
            value = await self.tool.arun(tool_input, *args, **kwargs)
        except Exception as exc:
            await _areport(self.airlock, approved, succeeded=False, output=_error(exc))
            raise
        await _areport(self.airlock, approved, **_outcome(value))
        return value

    def _proposed(self, tool_input: str | dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The call's arguments as the model gave them (what the graph injects left out),
        and the proposal's reason."""
        names = _model_arguments(self.tool)
        if isinstance(tool_input, str):
            arguments = {names[0] if len(names) == 1 else "input": tool_input}
        else:
            arguments = {k: v for k, v in tool_input.items() if k in names}
        reason = self.reason
        if reason is None:
            reason = (self.tool.description or "").strip().split("\n")[0]
        return arguments, reason

    def _refused(self, exc: Ended | NotDecided, tool_call_id: str | None) -> Any:
        if self.raise_refusals:
            raise exc
        content = f"{self.name} was not called: {_why(exc, self.timeout)}"
        if tool_call_id is None:
            return content
        return ToolMessage(content, tool_call_id=tool_call_id, name=self.name, status="error")


@overload
def requires_approval(
    airlock: Airlock | AsyncAirlock, tools: BaseTool | Callable, *, prefix: str = "",
    reason: str | None = None, timeout: float = 3600, raise_refusals: bool = False,
) -> AirlockTool: ...  # fmt: skip


@overload
def requires_approval(
    airlock: Airlock | AsyncAirlock, tools: Sequence[BaseTool | Callable], *, prefix: str = "",
    reason: str | None = None, timeout: float = 3600, raise_refusals: bool = False,
) -> list[AirlockTool]: ...  # fmt: skip


def requires_approval(airlock, tools, *, prefix="", reason=None, timeout=3600,
                      raise_refusals=False):  # fmt: skip
    """``tools`` (a LangChain tool, a function, or a list of them) behind Airlock: each
    call is a ``tool.call`` of ``prefix + tool.name`` with the model's arguments, made
    only once approved, its outcome reported. ``reason``: the proposals' reason (default:
    the first line of the tool's description). ``timeout``: seconds to wait for a
    decision, after which the proposal is withdrawn. A refused call is the tool's result,
    an error message with the reviewer's comment or the policy's reason; with
    ``raise_refusals``, ``Rejected``, ``Denied``, ``Expired``, ``Withdrawn`` or
    ``NotDecided`` instead. An ``AsyncAirlock`` serves async runs only."""
    if isinstance(tools, Sequence):
        return [
            requires_approval(
                airlock,
                one,
                prefix=prefix,
                reason=reason,
                timeout=timeout,
                raise_refusals=raise_refusals,
            )
            for one in tools
        ]
    tool = tools if isinstance(tools, BaseTool) else as_tool(tools)
    return AirlockTool(
        tool=tool,
        airlock=airlock,
        airlock_tool=prefix + tool.name,
        reason=reason,
        timeout=timeout,
        raise_refusals=raise_refusals,
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
        return_direct=tool.return_direct,
        response_format=tool.response_format,
        tags=tool.tags,
        metadata=tool.metadata,
        extras=tool.extras,
    )


def _decided(airlock: Airlock, tool: str, arguments: dict, reason: str, timeout: float) -> Proposal:
    """The approved proposal of this call; ``Ended`` or ``NotDecided`` (then withdrawn)."""
    return airlock._drive(flows.tool_call(tool, arguments, reason, timeout, _stopped(timeout)))


async def _adecided(
    airlock: Airlock | AsyncAirlock, tool: str, arguments: dict, reason: str, timeout: float
) -> Proposal:
    if not isinstance(airlock, AsyncAirlock):
        return await asyncio.to_thread(_decided, airlock, tool, arguments, reason, timeout)
    return await airlock._drive(
        flows.tool_call(tool, arguments, reason, timeout, _stopped(timeout))
    )


async def _areport(airlock: Airlock | AsyncAirlock, approved: Proposal, **outcome: Any) -> None:
    if isinstance(airlock, AsyncAirlock):
        await airlock.report(approved.execution_id, **outcome)
    else:
        await asyncio.to_thread(airlock.report, approved.execution_id, **outcome)


def _stopped(timeout: float) -> str:
    return f"the LangGraph tool stopped waiting after {timeout:g} s"


def _model_arguments(tool: BaseTool) -> list[str]:
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return list(schema.get("properties", {}))
    fields = getattr(schema, "model_fields", None) or getattr(schema, "__fields__", {})
    return list(fields)


def _outcome(value: Any) -> dict[str, Any]:
    """How a run of the tool went, as ``report`` takes it: a ``ToolMessage`` by its
    status and content, any other value as it is."""
    if isinstance(value, ToolMessage):
        return {"succeeded": value.status != "error", "output": value.content}
    return {"succeeded": True, "output": value}


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _why(exc: Ended | NotDecided, timeout: float) -> str:
    proposal = exc.proposal
    if isinstance(exc, NotDecided):
        return f"nobody decided within {timeout:g} s, so it was withdrawn (proposal #{proposal.id})"
    what = {Rejected: "rejected by a reviewer", Denied: "denied by Airlock's policy",
            Expired: "nobody decided before it expired"}.get(type(exc), "withdrawn")  # fmt: skip
    return f"{what} ({exc.reason}; proposal #{proposal.id})"


# The interrupt bridge.


class Decision(TypedDict):
    """What ``approval`` returns once the graph resumes: ``approved``; ``status``
    (approved, rejected, denied, expired, withdrawn); ``reason`` (the reviewers' comments,
    or the policy's reason); the proposal; and for an approved ``approval``, the execution
    to report to once its action is done (``airlock.report(decision["execution_id"],
    ...)``; None otherwise: ``resume`` reports the approval of any other interrupt)."""

    approved: bool
    status: str
    reason: str
    proposal_id: int
    execution_id: int | None


def approval(tool: str, arguments: dict[str, Any], *, reason: str = "") -> Decision:
    """In a node: stop the graph (``interrupt``) until Airlock decides this call of
    ``tool``; the ``Decision`` that ``resume`` gave. An approved call is reported by the
    node, once: ``airlock.report(decision["execution_id"], succeeded=..., output=...)``."""
    return interrupt({"airlock": "tool.call", "tool": tool, "arguments": arguments,
                      "reason": reason})  # fmt: skip


def resume(
    airlock: Airlock, state: Any, *, tool: str = INTERRUPT_TOOL, timeout: float = 3600
) -> Command | None:
    """The ``Command`` that resumes a graph stopped by interrupts with Airlock's decision
    on each, or None when nothing waits. ``state``: what ``invoke`` returned (its
    ``__interrupt__``), ``get_state``'s snapshot, or the interrupts. An interrupt of
    ``approval`` is a ``tool.call`` of its tool; any other is one of ``tool`` with its
    value as ``{"value": ...}``. ``NotDecided`` after ``timeout`` seconds: call again to
    wait on (each interrupt's proposal is found again, not made twice)."""
    pending = _interrupts(state)
    if not pending:
        return None
    return Command(resume=airlock._drive(_decisions(pending, tool, timeout)))


async def aresume(
    airlock: Airlock | AsyncAirlock, state: Any, *, tool: str = INTERRUPT_TOOL,
    timeout: float = 3600,
) -> Command | None:  # fmt: skip
    """``resume`` for async code."""
    if not isinstance(airlock, AsyncAirlock):
        return await asyncio.to_thread(resume, airlock, state, tool=tool, timeout=timeout)
    pending = _interrupts(state)
    if not pending:
        return None
    return Command(resume=await airlock._drive(_decisions(pending, tool, timeout)))


def _interrupts(state: Any) -> list[Interrupt]:
    if isinstance(state, Mapping):
        return list(state.get("__interrupt__", ()))
    if hasattr(state, "interrupts"):  # a StateSnapshot
        return list(state.interrupts)
    if isinstance(state, Interrupt):
        return [state]
    return list(state or ())


def _decisions(
    pending: list[Interrupt], tool: str, timeout: float
) -> Generator[flows.Request, dict, dict[str, Decision]]:
    """Every interrupt proposed first (reviewers see them together), then each decision."""
    proposals = []
    for one in pending:
        name, arguments, reason = _request(one.value, tool)
        proposals.append(
            (
                yield from flows.propose(
                    "tool.call",
                    {"tool": name, "arguments": flows.jsonable(arguments)},
                    reason=reason,
                    idempotency_key=f"langgraph-{one.id}",
                )
            )
        )
    deadline = time.monotonic() + timeout
    decisions: dict[str, Decision] = {}
    for one, proposal in zip(pending, proposals, strict=True):
        left = max(deadline - time.monotonic(), 0)
        try:
            decided = yield from flows.wait(proposal if left else proposal.id, "decided", left)
        except Ended as exc:
            decided = exc.proposal
        execution = decided.execution_id
        if (
            execution is not None
            and not _asked_by_approval(one.value)
            and decided.execution_status not in flows.TERMINAL
        ):
            # What was approved is the graph going on: done once it is given the decision.
            yield from flows.report(execution, True, "the graph resumes with the approval")
            execution = None
        decisions[one.id] = Decision(
            approved=decided.status == "approved",
            status=decided.status,
            reason=decided.reason,
            proposal_id=decided.id,
            execution_id=execution,
        )
    return decisions


def _asked_by_approval(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("airlock") == "tool.call"


def _request(value: Any, tool: str) -> tuple[str, Any, str]:
    """The tool call an interrupt's value asks for: (tool, arguments, reason)."""
    if _asked_by_approval(value):
        return value["tool"], value["arguments"], value.get("reason", "")
    return tool, {"value": value}, ""
