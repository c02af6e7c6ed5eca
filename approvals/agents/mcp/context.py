"""What a tool's coroutine gets: who calls, and where the call's progress goes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from approvals.agents.mcp.auth import Principal

HEARTBEAT_SECONDS = 15  # a pending call says so at least this often (clients and proxies idle out)

Report = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class Progress:
    """The progress notifications of one call (the client asked for them with a token, or not)."""

    report: Report
    sent: int = 0
    last: str = ""
    last_at: float = field(default=float("-inf"))

    async def say(self, message: str) -> None:
        self.sent += 1
        self.last, self.last_at = message, asyncio.get_running_loop().time()
        await self.report(self.sent, None, message)

    async def say_once(self, message: str) -> None:
        """Say ``message`` unless it was the last thing said, within the heartbeat."""
        quiet = asyncio.get_running_loop().time() - self.last_at
        if message != self.last or quiet >= HEARTBEAT_SECONDS:
            await self.say(message)


@dataclass
class Call:
    """One tool call: who makes it and where its progress goes."""

    principal: Principal
    progress: Progress
