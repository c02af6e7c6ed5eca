"""One run's exchange with a container's resident runner: the frames it reads, what it saw.

The host sends one JSON request and reads frames until the end-of-run report,
which must carry the run's nonce (only the runner knows it: anything else was
forged by the code). ``reusable`` says whether the container may serve
another run afterwards.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field

from ..base import Limits, OutputSink
from .channel import RunnerChannel

RUN_GRACE = 5.0  # past the run's own timeout before the host gives up on the runner
CANCEL_GRACE = 1.0  # cancel must stop a run within about a second
POLL = 0.05


@dataclass
class Exchange:
    """What the host saw of one run."""

    result: dict | None = None
    error: str | None = None
    timed_out: bool = False
    cancelled: bool = False
    # Only the runner knows it: an end-of-run report without it was forged by the run.
    nonce: str = field(default_factory=lambda: secrets.token_hex(16))


def pump(
    channel: RunnerChannel,
    sink: OutputSink,
    cancel: threading.Event,
    limits: Limits,
    exchange: Exchange,
) -> None:
    give_up = time.monotonic() + limits.timeout_seconds + RUN_GRACE
    while True:
        if cancel.is_set() and not exchange.cancelled:
            exchange.cancelled = True
            channel.send({"op": "cancel"})
            give_up = min(give_up, time.monotonic() + CANCEL_GRACE)
        frame = channel.next_frame(POLL)
        if frame is None:
            if time.monotonic() > give_up:
                # The runner did not answer in time: the container goes, run and all.
                exchange.timed_out = not exchange.cancelled
                exchange.error = (
                    None if exchange.cancelled else "the sandbox runner stopped answering"
                )
                return
            continue
        kind, payload = frame
        if kind == b"1":
            sink.write("stdout", payload)
        elif kind == b"2":
            sink.write("stderr", payload)
        elif kind == b"X":
            result = json.loads(payload)
            if result.get("nonce") != exchange.nonce:
                exchange.error = "the run forged the sandbox protocol"
                return
            exchange.result = result
            return
        elif kind == b"!":
            exchange.error = "sandbox runner failed: " + json.loads(payload).get("error", "")
            return


def reusable(exchange: Exchange) -> bool:
    result = exchange.result
    if result is None or exchange.error or exchange.cancelled or exchange.timed_out:
        return False
    if result.get("error"):
        return False
    exit_code = result.get("exit_code")
    # Killed by a signal (OOM, CPU or file-size limit): recycle rather than trust it.
    return bool(result.get("clean")) and exit_code is not None and exit_code >= 0
