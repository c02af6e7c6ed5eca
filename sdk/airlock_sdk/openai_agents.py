"""The OpenAI Agents SDK's tool approvals, answered by Airlock (``pip install
"airlock-sdk[openai-agents]"``):

    from airlock_sdk.openai_agents import run

    result = await run(airlock, agent, "Refund cus_42 30.50 EUR")   # an AsyncAirlock

``run`` is ``Runner.run`` that answers every tool approval the run stops for (a tool
made with ``needs_approval``) through Airlock: each call is a ``tool.call`` proposal of
the tool (``prefix`` + its name) with the call's arguments; once decided, the call is
approved in the run, or rejected with the reason as the tool's answer to the model, and
the run resumes until it ends. Each approved call's outcome is reported (what the tool
returned, or its exception), and one the run never made is reported failed, so no
execution is left to end ``lost`` (function tools; the other approvals the SDK asks
for, a hosted MCP server's or a shell's, are decided and not reported). ``run_sync`` is
the same with ``Airlock``.

Owns only this glue: ``agents`` is imported here and nowhere else in ``airlock_sdk``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

from agents import Agent, FunctionTool, RunConfig, RunHooks, Runner, RunResult, ToolApprovalItem
from agents.run_config import ToolErrorFormatterArgs
from agents.tool_context import ToolContext

from airlock_sdk.client import Airlock, AsyncAirlock
from airlock_sdk.errors import AirlockError, Ended, NotDecided

__all__ = ["run", "run_sync"]

log = logging.getLogger("airlock_sdk")


async def run(
    airlock: AsyncAirlock,
    agent: Agent[Any],
    input: Any,  # noqa: A002 - Runner.run's name
    *,
    prefix: str = "",
    timeout: float = 3600,
    hooks: RunHooks[Any] | None = None,
    run_config: RunConfig | dict[str, Any] | None = None,
    **runner_kwargs: Any,
) -> RunResult:
    """``Runner.run(agent, input, ...)`` with its tool approvals decided in Airlock.

    ``prefix``: put before the tool's name to name it in Airlock (``"billing."``: policy
    rules read ``tool:billing.refund``). ``timeout``: seconds to wait for each decision;
    one not decided by then is withdrawn and rejected in the run. ``hooks``,
    ``run_config`` and the rest go to ``Runner.run`` (on every resume). ``Paused``,
    ``RateLimited``, ``Unavailable`` end the run (after reporting what it had approved).
    """
    ledger = _Ledger(airlock)
    kwargs = {
        **runner_kwargs,
        "hooks": _Hooks(ledger, hooks),
        "run_config": _with_failures(run_config, ledger),
    }
    try:
        result = await Runner.run(agent, input, **kwargs)
        while result.interruptions:
            state = result.to_state()
            items = list(result.interruptions)
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [
                        group.create_task(_decide(airlock, item, prefix, timeout, ledger))
                        for item in items
                    ]
            except BaseExceptionGroup as failed:  # Paused, Unavailable, ...: as it was raised
                raise failed.exceptions[0] from None
            for item, task in zip(items, tasks, strict=True):
                refusal = task.result()
                if refusal is None:
                    state.approve(item)
                else:
                    state.reject(item, rejection_message=refusal)
            result = await Runner.run(agent, state, **kwargs)
    except BaseException as exc:
        await ledger.close(exc)
        raise
    await ledger.close(None)
    return result


def run_sync(
    airlock: Airlock,
    agent: Agent[Any],
    input: Any,
    **kwargs: Any,  # noqa: A002
) -> RunResult:
    """``run`` for the blocking ``Airlock`` (as ``Runner.run_sync``: not inside an event
    loop); the same arguments."""
    return asyncio.run(run(_Threaded(airlock), agent, input, **kwargs))  # type: ignore[arg-type]


async def _decide(
    airlock: AsyncAirlock, item: ToolApprovalItem, prefix: str, timeout: float, ledger: _Ledger
) -> str | None:
    """Propose ``item`` and wait for its decision: None once approved (its execution kept in
    ``ledger``), else the message the model gets instead of the tool's answer."""
    tool = prefix + (item.qualified_name or item.name or "tool")
    proposal = await airlock.propose(
        "tool.call", {"tool": tool, "arguments": _arguments(item)}, reason=_reason(item)
    )
    try:
        try:
            approved = await airlock.wait(
                proposal, timeout=timeout,
                withdraw_reason=f"the agent stopped waiting after {timeout:g} s",
            )  # fmt: skip
        except NotDecided:  # withdrawn: as it now stands
            approved = await airlock.wait(proposal.id, timeout=0)
    except Ended as exc:
        return f"Not done: {exc.proposal.status} in Airlock ({exc.reason})."
    raw = item.raw_item
    kind = raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)
    if kind == "function_call" and item.call_id is not None:  # the hooks see it end
        ledger.approved[item.call_id] = approved.execution_id
    return None


def _arguments(item: ToolApprovalItem) -> dict[str, Any]:
    text = item.arguments or "{}"
    try:
        value = json.loads(text)
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _reason(item: ToolApprovalItem) -> str:
    """The agent's name and the first line of the tool's description."""
    tools = getattr(item.agent, "tools", None) or []
    found = next((t for t in tools if getattr(t, "name", None) == item.tool_name), None)
    description = (getattr(found, "description", "") or "").strip().split("\n")[0]
    return f"{item.agent.name}: {description}" if description else f"asked by {item.agent.name}"


class _Ledger:
    """The run's approved calls not yet reported (call id → execution id), those started,
    and the exceptions of those that failed, until the tool's end reports them."""

    def __init__(self, airlock: AsyncAirlock):
        self.airlock = airlock
        self.approved: dict[str, int] = {}
        self.started: set[str] = set()
        self.failures: dict[str, str] = {}

    async def report(self, call_id: str, succeeded: bool, output: Any) -> None:
        execution_id = self.approved.pop(call_id, None)
        if execution_id is None:
            return
        try:
            await self.airlock.report(execution_id, succeeded=succeeded, output=output)
        except AirlockError as exc:  # the tool ran: the agent goes on; the execution says why
            log.warning("execution %s: the report was refused: %s", execution_id, exc)

    async def ended(self, call_id: str, result: Any) -> None:
        failure = self.failures.pop(call_id, None)
        await self.report(call_id, failure is None, failure if failure is not None else result)

    async def close(self, stopped: BaseException | None) -> None:
        """Report each approved call the run did not end as failed: with the exception that
        stopped the run if the call had started, else as not run."""
        error = f"{type(stopped).__name__}: {stopped}" if stopped is not None else None
        for call_id in list(self.approved):
            if call_id in self.failures:
                output = self.failures.pop(call_id)
            elif call_id in self.started and error is not None:
                output = error
            else:
                output = f"not run: {error or 'the run ended without making this call'}"
            await self.report(call_id, False, output)


class _Hooks(RunHooks[Any]):
    """The caller's hooks, and a report when an approved call ends."""

    def __init__(self, ledger: _Ledger, inner: RunHooks[Any] | None):
        self.ledger, self.inner = ledger, inner

    async def on_tool_end(self, context, agent, tool, result) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)
        if isinstance(context, ToolContext) and isinstance(tool, FunctionTool):
            await self.ledger.ended(context.tool_call_id, result)

    async def on_tool_start(self, context, agent, tool) -> None:
        if isinstance(context, ToolContext):
            self.ledger.started.add(context.tool_call_id)
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_llm_start(self, *args) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(*args)

    async def on_llm_end(self, *args) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(*args)

    async def on_agent_start(self, *args) -> None:
        if self.inner is not None:
            await self.inner.on_agent_start(*args)

    async def on_agent_end(self, *args) -> None:
        if self.inner is not None:
            await self.inner.on_agent_end(*args)

    async def on_handoff(self, *args) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(*args)


def _with_failures(
    config: RunConfig | dict[str, Any] | None, ledger: _Ledger
) -> RunConfig | dict[str, Any]:
    """``config`` whose tool error formatter (the SDK's hook for a function tool's exception,
    before the model gets its message) also notes an approved call's exception. A dict stays
    a dict, so that ``Runner`` still owns (and closes) the model provider it makes."""
    inner = config.tool_error_formatter if isinstance(config, RunConfig) else None
    if isinstance(config, dict):
        inner = config.get("tool_error_formatter")

    def formatter(args: ToolErrorFormatterArgs[Any]) -> Any:
        if args.kind == "tool_exception" and args.call_id in ledger.approved:
            ledger.failures[args.call_id] = f"{type(args.error).__name__}: {args.error}"
        return inner(args) if inner is not None else None

    if isinstance(config, RunConfig):
        return dataclasses.replace(config, tool_error_formatter=formatter)
    return {**(config or {}), "tool_error_formatter": formatter}


class _Threaded:
    """A blocking ``Airlock``'s calls, awaited in a thread: what ``run`` needs of it."""

    def __init__(self, airlock: Airlock):
        self._airlock = airlock

    async def propose(self, *args, **kwargs):
        return await asyncio.to_thread(self._airlock.propose, *args, **kwargs)

    async def wait(self, *args, **kwargs):
        return await asyncio.to_thread(self._airlock.wait, *args, **kwargs)

    async def withdraw(self, *args, **kwargs):
        return await asyncio.to_thread(self._airlock.withdraw, *args, **kwargs)

    async def report(self, *args, **kwargs):
        return await asyncio.to_thread(self._airlock.report, *args, **kwargs)
