"""What a target's live state is (``TargetState``), what reads one (``Reader``), and the
one bound every read runs under (``within``): an answer in ``READ_SECONDS`` or "unknown".

A read runs in a small pool of threads of its own so that the page waits for
the deadline and no longer, whatever the engine or the host does: a socket
that accepts and never answers, a systemctl that hangs. The read itself is
bounded too (its client's timeout, its command's), a little past the deadline
(``BACKSTOP_SECONDS``): the page's own deadline is always the one that gives
up first and says so, and a late read ends soon after, so the pool never fills.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime

from infrastructure.per_process import PerProcess

log = logging.getLogger(__name__)

READ_SECONDS = 1.0  # what a page waits for a target's state, at most
BACKSTOP_SECONDS = 0.5  # how much longer a read may go on by itself, unwaited for
POOL_THREADS = 4
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Fact:
    """One line of a state: a label and its text, or a moment (shown with how long ago)."""

    label: str
    text: str = ""
    when: datetime | None = None


@dataclass(frozen=True)
class TargetState:
    """A target as it is now, or "unknown" and why."""

    kind: str  # "container", "service"
    name: str  # what was looked at: "web-1", "nginx on db-1"
    status: str = UNKNOWN  # the one word read first: running, exited, active, failed…
    facts: tuple[Fact, ...] = ()
    why: str = ""  # why the state is unknown ("" when it is known)
    read_ms: int = 0

    @property
    def known(self) -> bool:
        return not self.why

    def unknown(self, why: str) -> TargetState:
        return TargetState(self.kind, self.name, UNKNOWN, (), why, self.read_ms)


@dataclass(frozen=True)
class Reader:
    """How one kind of target is read: what it is called, and its state (read-only)."""

    kind: str
    name: Callable[[dict], str]
    state: Callable[[dict, float], TargetState]  # (parameters, the seconds it may take)


_pool: PerProcess[ThreadPoolExecutor] = PerProcess(
    lambda: ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="target-state")
)


def within(reader: Reader, parameters: dict, seconds: float = READ_SECONDS) -> TargetState:
    """``reader``'s state of the target ``parameters`` name, or "unknown" past ``seconds``."""
    began = time.monotonic()
    blank = TargetState(reader.kind, reader.name(parameters))
    future: Future = _pool().submit(reader.state, parameters, seconds + BACKSTOP_SECONDS)
    try:
        state = future.result(timeout=seconds)
    except FutureTimeout:
        future.cancel()  # still queued behind reads that hang: never started
        state = blank.unknown(f"no answer within {seconds:g} s")
    except Exception as exc:  # a reader's bug must not cost the reviewer the page
        log.exception("reading the state of %s %s failed", blank.kind, blank.name)
        state = blank.unknown(f"could not be read: {exc}")
    elapsed = int((time.monotonic() - began) * 1000)
    return TargetState(state.kind, state.name, state.status, state.facts, state.why, elapsed)
