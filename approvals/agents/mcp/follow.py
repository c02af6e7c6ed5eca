"""Following an execution's output for a tool call, as the live-output websocket does.

The call joins the execution's group on the channel layer first, then reads
what the database already holds after the last sequence number it saw; live
chunks that continue that sequence are passed on as they come, and a gap (a
message the layer dropped) or the final status sends it back to the
database. Every chunk reaches the call once, in order, whatever the layer
loses, and the final status is read after the last chunk was written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import anyio
from channels.layers import get_channel_layer

from approvals.agents.mcp.db import on_thread
from executions.broadcast import execution_group
from executions.models import Execution
from executions.services import status_message

log = logging.getLogger(__name__)

PAGE = 500
SAFETY_SECONDS = 2.0  # a read from the database even without a message: the layer may drop some

OnChunk = Callable[[dict], Awaitable[None]]


class OutputFollower:
    """Passes one execution's chunks to ``on_chunk`` until it ends or the time is up."""

    def __init__(self, execution_id: int, on_chunk: OnChunk, after: int = 0):
        self.execution_id = execution_id
        self.on_chunk = on_chunk
        self.last_seq = after
        self.finished = False
        self._layer = get_channel_layer()
        self._channel: str | None = None
        self._receiving: asyncio.Future | None = None

    async def follow(self, deadline: float) -> bool:
        """True once the execution has ended and every chunk was passed on; False at ``deadline``."""
        await self._subscribe()
        try:
            await self._catch_up()
            while not self.finished:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return False
                message = await self._next(min(left, SAFETY_SECONDS))
                await self._handle(message)
            return True
        finally:
            # Shielded: a call cancelled by the SDK's task group (the client went
            # away) stays cancelled at every await, and would leave its channel behind.
            with anyio.CancelScope(shield=True):
                await self._unsubscribe()

    async def _handle(self, message: dict | None) -> None:
        kind = message.get("type") if message is not None else None
        if kind == "output.chunks":
            chunks = [c for c in message.get("chunks", []) if c["seq"] > self.last_seq]
            if not chunks and message.get("last_seq", 0) <= self.last_seq:
                return
            if chunks and chunks[0]["seq"] == self.last_seq + 1:
                for chunk in chunks:
                    await self._pass_on(chunk)
                return
        elif kind == "execution.status" and not message.get("terminal"):
            return
        await self._catch_up()  # a gap, chunks told but not carried, the end, the safety read

    async def _catch_up(self) -> None:
        while not self.finished:
            status, chunks = await _read(self.execution_id, self.last_seq)
            for chunk in chunks:
                await self._pass_on(chunk)
            if len(chunks) == PAGE:
                continue
            self.finished = status["terminal"]
            return

    async def _pass_on(self, chunk: dict) -> None:
        self.last_seq = chunk["seq"]
        await self.on_chunk(chunk)

    async def _subscribe(self) -> None:
        if self._layer is None:
            return
        try:
            self._channel = await self._layer.new_channel()
            await self._layer.group_add(execution_group(self.execution_id), self._channel)
        except Exception:  # then the database alone, every SAFETY_SECONDS
            log.exception("cannot follow execution %s on the channel layer", self.execution_id)
            self._channel = None

    async def _next(self, timeout: float) -> dict | None:
        """The next message for the execution, or None after ``timeout`` seconds."""
        if self._channel is None:
            await asyncio.sleep(timeout)
            return None
        if self._receiving is None or self._receiving.done():
            # Kept across calls: cancelling a receive could lose the message it was taking.
            self._receiving = asyncio.ensure_future(self._layer.receive(self._channel))
        done, _ = await asyncio.wait([self._receiving], timeout=timeout)
        if not done or self._receiving.cancelled():
            return None
        if self._receiving.exception() is not None:
            log.warning("channel layer receive failed: %s", self._receiving.exception())
            return None
        return self._receiving.result()

    async def _unsubscribe(self) -> None:
        if self._receiving is not None:
            self._receiving.cancel()
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._layer.group_discard(execution_group(self.execution_id), self._channel)


@on_thread
def _read(execution_id: int, after: int) -> tuple[dict, list[dict]]:
    # Status first: a terminal status is written after the last chunk, so the
    # chunks read next are complete whenever the status says terminal.
    execution = Execution.objects.get(pk=execution_id)
    chunks = list(
        execution.chunks.filter(seq__gt=after)
        .order_by("seq")
        .values("seq", "stream", "data")[:PAGE]
    )
    return status_message(execution), chunks
