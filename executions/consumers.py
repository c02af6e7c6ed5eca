"""Live output: ``/ws/executions/{id}/?after=SEQ``.

Sends every chunk after ``after`` as ``{"type": "chunk", seq, stream, data}``,
then live chunks as they are broadcast, then ``{"type": "status", …}`` with
the final status, and closes. Chunks are deduplicated, and gaps (and a burst
told but not carried, ``output.chunks_message``) are filled from the database
by sequence number, so a client that reconnects with the
last seq it saw gets the rest with no gap and no duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from .broadcast import execution_group
from .models import Execution
from .services import status_message

log = logging.getLogger(__name__)

PAGE = 500
SAFETY_SECONDS = 5.0
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400


class ExecutionOutputConsumer(AsyncJsonWebsocketConsumer):
    last_seq = 0
    finished = False
    _safety: asyncio.Task | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._sending = asyncio.Lock()  # the safety read and live messages take turns

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        try:
            self.last_seq = _after(self.scope.get("query_string", b""))
        except ValueError:
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        self.execution_id = self.scope["url_route"]["kwargs"]["execution_id"]
        if not await self._visible(user):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = execution_group(self.execution_id)
        await self.accept()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.catch_up()
        if not self.finished:
            self._safety = asyncio.create_task(self._read_now_and_then())

    async def disconnect(self, code: int) -> None:
        if self._safety is not None:
            self._safety.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._safety
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _read_now_and_then(self) -> None:
        while not self.finished:
            await asyncio.sleep(SAFETY_SECONDS)
            try:
                await self.catch_up()
            except Exception:  # the next read may work; live messages go on meanwhile
                log.exception("safety read of execution %s failed", self.execution_id)

    async def receive_json(self, content, **kwargs) -> None:
        pass  # the stream is one-way; cancel goes through the API or the console

    async def output_chunks(self, event: dict) -> None:
        async with self._sending:
            chunks = [c for c in event["chunks"] if c["seq"] > self.last_seq]
            if self.finished or (not chunks and event.get("last_seq", 0) <= self.last_seq):
                return
            if chunks and chunks[0]["seq"] == self.last_seq + 1:
                for chunk in chunks:
                    await self._send_chunk(chunk)
                return
        await self.catch_up()  # a gap, or chunks told but not carried: the database has them

    async def execution_status(self, event: dict) -> None:
        if self.finished:
            return
        if event.get("terminal"):
            await self.catch_up()
        else:
            await self.send_json({"type": "status", **_public(event)})

    async def catch_up(self) -> None:
        async with self._sending:
            while not self.finished:
                status, chunks = await self._read(self.last_seq)
                for chunk in chunks:
                    await self._send_chunk(chunk)
                if len(chunks) == PAGE:
                    continue
                if status["terminal"]:
                    self.finished = True
                    await self.send_json({"type": "status", **status})
                    await self.close()
                return

    async def _send_chunk(self, chunk: dict) -> None:
        await self.send_json({"type": "chunk", **chunk})
        self.last_seq = chunk["seq"]

    @database_sync_to_async
    def _visible(self, user) -> bool:
        return Execution.objects.visible_to(user).filter(pk=self.execution_id).exists()

    @database_sync_to_async
    def _read(self, after: int) -> tuple[dict, list[dict]]:
        # Status first: a terminal status is written after the last chunk, so
        # the chunks read next are complete whenever the status says terminal.
        execution = Execution.objects.get(pk=self.execution_id)
        chunks = list(
            execution.chunks.filter(seq__gt=after)
            .order_by("seq")
            .values("seq", "stream", "data")[:PAGE]
        )
        return status_message(execution), chunks


def _public(event: dict) -> dict:
    return {k: v for k, v in event.items() if k != "type"}


def _after(query_string: bytes) -> int:
    values = parse_qs(query_string.decode("latin-1")).get("after")
    if not values:
        return 0
    after = int(values[0])
    if after < 0:
        raise ValueError(after)
    return after
