"""PydanticAI's tool approvals, decided in Airlock: ``AirlockApprovals``, a capability.

    from airlock_sdk.pydantic_ai import AirlockApprovals

    agent = Agent(model, tools=[Tool(refund, requires_approval=True)],
                  capabilities=[AirlockApprovals(airlock, prefix="billing.")])

Each call the run defers for approval (a tool with ``requires_approval=True``, or one that
raises ``ApprovalRequired``) is proposed as a ``tool.call`` of ``prefix`` + the tool's name,
with the call's arguments, and the run waits for the decisions, all of a step's at once.
Approved, the tool runs and its return value (or exception) is reported. Rejected, denied,
expired or not decided in ``timeout`` (then withdrawn), the model gets ``ToolDenied`` with
the reason (``Airlock: proposal #7 rejected: reviewer: over the limit``). Other errors
(``Paused``, ``RateLimited``, ``Unavailable``) end the run. ``decide`` answers a
``DeferredToolRequests`` a run returned, for the next run (with this capability, which reports).

Takes ``AsyncAirlock`` or ``Airlock`` (its calls run in a thread); the only module of the
SDK that imports ``pydantic_ai``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolDefinition,
    ToolDenied,
)
from pydantic_core import to_jsonable_python

from airlock_sdk import flows
from airlock_sdk.client import Airlock, AsyncAirlock
from airlock_sdk.errors import AirlockError, Ended, NotDecided
from airlock_sdk.types import Proposal

METADATA_KEY = "airlock"  # DeferredToolResults.metadata[id][METADATA_KEY]: the proposal's ids

__all__ = ["AirlockApprovals"]

log = logging.getLogger("airlock_sdk")


@dataclass
class AirlockApprovals(AbstractCapability[Any]):
    """Decides the run's deferred approvals in Airlock and reports the approved calls.

    ``prefix``: put before a tool's name to make Airlock's (``"billing."``: ``billing.refund``),
    which policy rules and ``tool.call:`` capabilities match. ``reason``: each proposal's
    (default: the first line of the tool's description). ``timeout``: seconds to wait for a
    decision before the proposal is withdrawn and the call denied.
    """

    airlock: AsyncAirlock | Airlock
    prefix: str = ""
    reason: str | None = None
    timeout: float = 3600

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def decide(
        self, requests: DeferredToolRequests, tools: dict[str, ToolDefinition] | None = None
    ) -> DeferredToolResults:
        """``requests.approvals`` each proposed and decided: ``True`` (and, in ``metadata``,
        the proposal's execution to report to) or ``ToolDenied`` with the reason; who decided
        in ``answered_by``. ``tools``: the run's tool definitions, for the default reason."""
        decided = await asyncio.gather(
            *(self._decide(call, (tools or {}).get(call.tool_name)) for call in requests.approvals)
        )
        results = DeferredToolResults()
        for call, (approval, proposal) in zip(requests.approvals, decided, strict=True):
            results.approvals[call.tool_call_id] = approval
            if proposal is not None:
                results.answered_by[call.tool_call_id] = _deciders(proposal)
                if approval is True:
                    ids = {"proposal_id": proposal.id, "execution_id": proposal.execution_id}
                    results.metadata[call.tool_call_id] = {METADATA_KEY: ids}
        return results

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        return await self.decide(requests, ctx.tools) if requests.approvals else None

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call, tool_def, args, handler):
        execution_id = _execution_of(ctx)
        if execution_id is None:  # not a call approved in Airlock
            return await handler(args)
        try:
            value = await handler(args)
        except Exception as exc:
            await self._report(execution_id, False, f"{type(exc).__name__}: {exc}")
            raise
        await self._report(execution_id, True, _jsonable(value))
        return value

    async def _report(self, execution_id: int, succeeded: bool, output: Any) -> None:
        """Report how an approved call went; a report that fails is logged, not raised: the
        tool ran, and its result goes on to the model (the execution ends ``lost``)."""
        try:
            await self._call("report", execution_id, succeeded=succeeded, output=output)
        except AirlockError as exc:
            log.warning("could not report execution #%s: %s", execution_id, exc)

    async def _decide(
        self, call: ToolCallPart, tool: ToolDefinition | None
    ) -> tuple[bool | ToolDenied, Proposal | None]:
        reason = self.reason
        if reason is None:
            reason = ((tool.description if tool else None) or "").strip().split("\n")[0]
        arguments = call.args_as_dict()
        parameters = {"tool": self.prefix + call.tool_name, "arguments": flows.jsonable(arguments)}
        try:
            proposal = await self._call("propose", "tool.call", parameters, reason=reason)
            proposal = await self._call(
                "wait", proposal, timeout=self.timeout,
                withdraw_reason=f"the agent stopped waiting after {self.timeout:g} s",
            )  # fmt: skip
        except Ended as exc:
            return ToolDenied(f"Airlock: {exc}"), exc.proposal
        except NotDecided as exc:
            return ToolDenied(f"Airlock: {exc}"), None
        return True, proposal

    async def _call(self, name: str, *args, **kwargs) -> Any:
        method = getattr(self.airlock, name)
        if inspect.iscoroutinefunction(method):
            return await method(*args, **kwargs)
        return await asyncio.to_thread(method, *args, **kwargs)


def _execution_of(ctx: RunContext[Any]) -> int | None:
    """The execution an approved call reports to, as ``decide`` left it in its metadata."""
    metadata = ctx.tool_call_metadata if ctx.tool_call_approved else None
    ids = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    return ids.get("execution_id") if isinstance(ids, dict) else None


def _deciders(proposal: Proposal) -> str:
    """Who decided: the reviewers, else Airlock (its policy, an expiry)."""
    reviewers = [d["reviewer"] for d in proposal.raw.get("decisions", []) if d.get("reviewer")]
    return ", ".join(dict.fromkeys(reviewers)) or "airlock"


def _jsonable(value: Any) -> Any:
    """A tool's return value as JSON holds it (a Pydantic model as its fields); ``repr`` else."""
    return to_jsonable_python(value, fallback=repr)
