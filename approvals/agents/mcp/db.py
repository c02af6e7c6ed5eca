"""Database work of MCP calls, off the event loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from channels.db import DatabaseSyncToAsync

P = ParamSpec("P")
R = TypeVar("R")

# Threads of their own: Channels' default (one thread for every sync call of
# the process) would queue every call's reads behind one another. A thread
# keeps its connection between calls, as a request thread does.
_executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mcp")


def on_thread(function: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``function`` as a coroutine run on a pool thread, its connection checked before and after."""
    return DatabaseSyncToAsync(function, thread_sensitive=False, executor=_executor)
