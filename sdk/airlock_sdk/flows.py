"""The protocol, written once for both clients: each operation is a generator that yields
the ``Request`` it needs next and is sent the answer's JSON (or thrown the ``ApiError``
the API refused it with); what it returns is the operation's result. ``client.Airlock`` drives them with httpx's client,
``client.AsyncAirlock`` with its async one.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from airlock_sdk.errors import ENDED, ApiError, Failed, NotDecided
from airlock_sdk.types import Proposal, Result

WAIT_STEP = 30  # seconds of one long-poll
TERMINAL = ("succeeded", "failed", "timed_out", "cancelled", "lost")

Flow = Generator["Request", dict[str, Any], Any]


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # under /api/v1/
    params: dict[str, Any] = field(default_factory=dict)
    json: dict[str, Any] | None = None
    wait: float = 0  # seconds the server may hold it, on top of the client's timeout
    # Safe to send again when no answer came: a read, or a write the server
    # recognises as the same one (a proposal's idempotency key).
    retry: bool = False

    @property
    def repeatable(self) -> bool:
        return self.retry or self.method == "GET"


def propose(
    action: str,
    parameters: dict[str, Any],
    reason: str = "",
    urgency: str = "normal",
    idempotency_key: str | None = None,
) -> Generator[Request, dict, Proposal]:
    body: dict[str, Any] = {
        "action": action, "parameters": parameters, "reason": reason, "urgency": urgency,
    }  # fmt: skip
    # Always a key: a proposal whose answer was lost on the way (a dropped
    # connection, a 502 from a proxy) is asked for again and found, not made twice.
    body["idempotency_key"] = idempotency_key or f"sdk-{uuid.uuid4().hex}"
    return Proposal.of((yield Request("POST", "proposals", json=body, retry=True)))


def wait(
    proposal: Proposal | int,
    until: str = "decided",
    timeout: float = 3600,
    withdraw_reason: str | None = None,
) -> Generator[Request, dict, Proposal]:
    """The proposal once decided (``until="decided"``) or once its run ended
    (``"finished"``); ``Denied``, ``Rejected``, ``Expired``, ``Withdrawn`` if it will not
    run, ``NotDecided`` if still pending after ``timeout`` seconds. With
    ``withdraw_reason``, one still pending then is first withdrawn with that reason, so
    nobody approves it later; if it was decided meanwhile, that decision stands."""
    pk = proposal if isinstance(proposal, int) else proposal.id
    deadline = time.monotonic() + timeout
    current = proposal if isinstance(proposal, Proposal) else None
    while current is None or not _reached(current, until):
        left = deadline - time.monotonic()
        if current is not None and left <= 0:
            if current.status == "pending":
                if withdraw_reason is not None:
                    return (yield from _withdrawn_late(current, until, timeout, withdraw_reason))
                raise NotDecided(current, timeout)
            return current  # decided, its run not ended in time: the caller reads its state
        step = min(WAIT_STEP, max(int(left), 1)) if current is not None else 0
        params = {"wait": step, "until": until} if step else {}
        current = Proposal.of((yield Request("GET", f"proposals/{pk}", params=params, wait=step)))
        if current.status in ENDED:
            raise ENDED[current.status](current)
    return current


def _reached(proposal: Proposal, until: str) -> bool:
    if proposal.status in ENDED:
        raise ENDED[proposal.status](proposal)
    if proposal.status == "pending":
        return False
    return until == "decided" or proposal.execution_status in TERMINAL


def _withdrawn_late(
    current: Proposal, until: str, timeout: float, reason: str
) -> Generator[Request, dict, Proposal]:
    """``NotDecided`` once ``current`` is withdrawn; or, when the withdrawal finds it
    decided just now (409), its decision as it stands (``wait`` at once)."""
    try:
        yield from withdraw(current, reason)
    except ApiError as refused:
        if refused.status != 409:
            raise
        return (yield from wait(current.id, until, 0))
    raise NotDecided(current, timeout)


def withdraw(proposal: Proposal | int, reason: str = "") -> Generator[Request, dict, Proposal]:
    """Take back a pending proposal of this agent: it is ``withdrawn``, a final state.
    Sent once (a second try would find it withdrawn already: a 409)."""
    pk = proposal if isinstance(proposal, int) else proposal.id
    body = {"reason": reason}
    return Proposal.of((yield Request("POST", f"proposals/{pk}/withdraw", json=body)))


def result(execution_id: int) -> Generator[Request, dict, Result]:
    return Result.of((yield Request("GET", f"executions/{execution_id}")))


def run_script(
    code: str, language: str = "python", reason: str = "", timeout: float = 3600
) -> Generator[Request, dict, Result]:
    """Propose a script, wait for its decision and its run, and its result; ``Failed``
    if it did not succeed."""
    proposal = yield from propose(
        "script.execute", {"language": language, "code": code}, reason=reason
    )
    proposal = yield from wait(proposal, "finished", timeout)
    inline = proposal.raw.get("result")  # the answer to until=finished carries it
    if inline is not None and not inline["output_truncated"]:
        ran = Result.of(inline)
    else:
        ran = yield from result(proposal.execution_id)
    if not ran.succeeded:
        raise Failed(ran)
    return ran


def report(
    execution_id: int, succeeded: bool, output: Any = ""
) -> Generator[Request, dict, Result]:
    body = {"status": "succeeded" if succeeded else "failed", "output": jsonable(output)}
    return Result.of((yield Request("POST", f"executions/{execution_id}/report", json=body)))


def tool_call(
    tool: str,
    arguments: dict[str, Any],
    reason: str,
    timeout: float,
    withdraw_reason: str | None = None,
) -> Generator[Request, dict, Proposal]:
    """A tool call proposed and decided: the approved proposal (its execution waits for
    the report); ``Denied``, ``Rejected``, ``Expired``, ``Withdrawn``, ``NotDecided``
    otherwise (withdrawn first with ``withdraw_reason``, as ``wait`` says)."""
    proposal = yield from propose(
        "tool.call", {"tool": tool, "arguments": jsonable(arguments)}, reason=reason
    )
    return (yield from wait(proposal, "decided", timeout, withdraw_reason))


def jsonable(value: Any) -> Any:
    """``value`` as JSON has it: what JSON cannot hold becomes its ``repr``."""
    return json.loads(json.dumps(value, default=repr))
