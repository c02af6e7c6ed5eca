"""``Airlock`` and ``AsyncAirlock``: the flows driven over HTTP, and functions behind approval."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

try:  # an agent that traces with OpenTelemetry: Airlock's trace of a proposal continues its own
    from opentelemetry import trace as _otel_trace
except ImportError:  # optional: without it, nothing is sent
    _otel_trace = None

from airlock_sdk import flows
from airlock_sdk.errors import ApiError, Paused, RateLimited, Unavailable
from airlock_sdk.types import Proposal, Result

F = TypeVar("F", bound=Callable[..., Any])
USER_AGENT = "airlock-sdk/0.1"


# A call that got no answer, or a 502/503/504 (a proxy between, a web process
# restarting, the database away), is sent again after these pauses when it is
# safe to (``flows.Request.repeatable``); a Retry-After up to MAX_PAUSE wins.
PAUSES = (0.5, 1.0, 2.0, 4.0)
MAX_PAUSE = 10.0
RETRIED_STATUSES = (502, 503, 504)
# A proposal refused for now (429: too many pending, or too fast) is sent again, the same
# one with the same idempotency key, after the server's Retry-After, for up to this many
# seconds in all per call (the client's ``rate_limit_wait``); 423 (paused) never is.
RATE_LIMIT_WAIT = 300.0

log = logging.getLogger("airlock_sdk")


@dataclass
class _Tries:
    """One request's tries so far: those that got no answer (or a 5xx), and the seconds
    spent waiting out refusals (429)."""

    failed: int = 0
    waited: float = 0.0


def _pause(request: flows.Request, attempt: int, response: httpx.Response | None) -> float | None:
    """Seconds to wait before sending ``request`` again, or None to give up."""
    if not request.repeatable or attempt >= len(PAUSES):
        return None
    if response is None:
        return PAUSES[attempt]
    if response.status_code not in RETRIED_STATUSES:
        return None
    after = _retry_after(response)
    return min(after, MAX_PAUSE) if after is not None else PAUSES[attempt]


def _retry_after(response: httpx.Response) -> float | None:
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _refused_pause(request: flows.Request, response: httpx.Response, left: float) -> float | None:
    """Seconds to wait out a 429 before sending ``request`` again: the server's Retry-After,
    if the call may still wait that long; None to give up (``RateLimited``)."""
    seconds = _retry_after(response)
    if not request.repeatable or seconds is None:
        return None
    seconds = max(seconds, PAUSES[0])  # a Retry-After of 0 still counts against the budget
    return seconds if seconds <= left else None


def _settle(
    request: flows.Request,
    tries: _Tries,
    got: httpx.Response | httpx.HTTPError,
    url: str,
    patience: float,
) -> dict[str, Any] | float:
    """What one try came to: the answer, or the seconds to wait before the next try
    (``Unavailable`` or ``ApiError`` when there is neither); counts it in ``tries``."""
    response = got if isinstance(got, httpx.Response) else None
    if response is not None and response.status_code == 429:
        pause = _refused_pause(request, response, patience - tries.waited)
        if pause is None:
            return _answer(response)  # RateLimited
        tries.waited += pause
        log.warning("%s: retrying in %g s", _error_of(response).get("type", "429"), pause)
        return pause
    pause = _pause(request, tries.failed, response)
    if pause is not None:
        tries.failed += 1
        return pause
    if response is None:
        raise Unavailable(f"cannot reach {url}: {got}") from got
    return _answer(response)


def _error_of(response: httpx.Response) -> dict[str, Any]:
    try:
        error = response.json().get("error", {})
    except (ValueError, AttributeError):
        return {}
    return error if isinstance(error, dict) else {}


def _answer(response: httpx.Response) -> dict[str, Any]:
    if response.is_success:
        return response.json()
    if response.status_code >= 500:
        raise Unavailable(f"{response.request.url} answered {response.status_code}")
    error = _error_of(response)
    status, kind = response.status_code, error.get("type", "error")
    message = error.get("message") or f"HTTP {status}"
    if status == 423:
        raise Paused(status, kind, message)
    if status == 429:
        raise RateLimited(status, kind, message, _retry_after(response))
    raise ApiError(status, kind, message)


def _httpx_arguments(request: flows.Request, timeout: float) -> dict[str, Any]:
    return {
        "method": request.method,
        "url": f"/api/v1/{request.path}",
        "params": request.params,
        "json": request.json,
        "timeout": timeout + request.wait,
        "headers": _trace_headers(),
    }


def _trace_headers() -> dict[str, str]:
    """``traceparent`` (W3C) of the caller's current span, when OpenTelemetry is installed
    and one is current: Airlock makes its spans of the proposal that span's children."""
    if _otel_trace is None:
        return {}
    context = _otel_trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    flags = int(context.trace_flags) & 0xFF
    return {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"}


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json",
            "User-Agent": USER_AGENT}  # fmt: skip


def _arguments(function: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """A call's arguments by name, as the function declares them (``self`` left out)."""
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return {name: value for name, value in bound.arguments.items() if name not in ("self", "cls")}


def _reason(function: Callable, reason: str | None) -> str:
    return reason if reason is not None else (inspect.getdoc(function) or "").split("\n")[0]


class Airlock:
    """Airlock's API for an agent (its token), one call at a time.

    ``timeout``: seconds for an answer (on top of a long-poll's own wait).
    ``rate_limit_wait``: seconds one call may spend, in all, waiting out refusals: a
    proposal answered 429 (the agent's ``max_pending`` proposals wait for review, or it
    proposes faster than its ``max_proposals_per_minute``) is sent again after the
    server's ``Retry-After``, the same proposal with the same idempotency key, until
    it is made or this is spent (then ``RateLimited``; 0: at once). A paused agent
    (423) raises ``Paused`` at once: only an admin can resume it.
    """

    def __init__(
        self, url: str, token: str, timeout: float = 30.0, rate_limit_wait: float = RATE_LIMIT_WAIT
    ):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.rate_limit_wait = rate_limit_wait
        self._http = httpx.Client(base_url=self.url, headers=_headers(token), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Airlock:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _drive(self, flow: flows.Flow) -> Any:
        try:
            request = next(flow)
            while True:
                try:
                    answer = self._send(request)
                except ApiError as refused:  # the flow may take a refusal (or it goes on up)
                    request = flow.throw(refused)
                else:
                    request = flow.send(answer)
        except StopIteration as done:
            return done.value

    def _send(self, request: flows.Request) -> dict[str, Any]:
        tries = _Tries()
        while True:
            try:
                got = self._http.request(**_httpx_arguments(request, self.timeout))
            except httpx.HTTPError as exc:
                got = exc
            step = _settle(request, tries, got, self.url, self.rate_limit_wait)
            if not isinstance(step, float):  # the answer; a float is a pause
                return step
            time.sleep(step)

    def propose(self, action: str, parameters: dict[str, Any], *, reason: str = "",
                urgency: str = "normal", idempotency_key: str | None = None) -> Proposal:  # fmt: skip
        """Propose an action; the proposal as the policy left it (``status`` says).

        Refused for now (429), it is sent again after the server's Retry-After with the
        same idempotency key, for up to ``rate_limit_wait`` seconds in all (the client's,
        default 300), then ``RateLimited``; ``Paused`` (423) at once."""
        return self._drive(flows.propose(action, parameters, reason, urgency, idempotency_key))

    def wait(self, proposal: Proposal | int, *, until: str = "decided",
             timeout: float = 3600, withdraw_reason: str | None = None) -> Proposal:  # fmt: skip
        """The proposal once decided, or (``until="finished"``) once its run ended;
        ``Denied``, ``Rejected``, ``Expired`` or ``Withdrawn`` if it will not run,
        ``NotDecided`` if still pending after ``timeout`` seconds: withdrawn first when
        ``withdraw_reason`` is given (a decision made meanwhile stands)."""
        return self._drive(flows.wait(proposal, until, timeout, withdraw_reason))

    def withdraw(self, proposal_id: Proposal | int, reason: str = "") -> Proposal:
        """Take back a pending proposal of this agent (one nobody needs any more): it is
        ``withdrawn``, a final state, and nothing runs; ``reason`` (up to 500 characters)
        is kept for reviewers and the audit trail. ``ApiError`` 409 ``conflict`` once it
        was decided, 404 ``not_found`` for a proposal not this agent's."""
        return self._drive(flows.withdraw(proposal_id, reason))

    def result(self, execution_id: int) -> Result:
        return self._drive(flows.result(execution_id))

    def run_script(self, code: str, *, language: str = "python", reason: str = "",
                   timeout: float = 3600) -> Result:  # fmt: skip
        """Run a script behind approval; its result, or ``Failed`` with it."""
        return self._drive(flows.run_script(code, language, reason, timeout))

    def report(self, execution_id: int, *, succeeded: bool, output: Any = "") -> Result:
        """How a tool call the agent carried out went (once, before its deadline)."""
        return self._drive(flows.report(execution_id, succeeded, output))

    def requires_approval(self, tool: str, *, reason: str | None = None,
                          timeout: float = 3600) -> Callable[[F], F]:  # fmt: skip
        """Decorate a function: each call is first a ``tool.call`` of ``tool`` with the
        call's arguments, and runs only once approved; its return value (or its
        exception) is reported. ``Denied``, ``Rejected``, ``Expired``, ``Withdrawn``,
        ``NotDecided`` (or ``Paused``, ``RateLimited``) instead of running."""

        def decorate(function: F) -> F:
            @functools.wraps(function)
            def call(*args, **kwargs):
                arguments = _arguments(function, args, kwargs)
                approved = self._drive(
                    flows.tool_call(tool, arguments, _reason(function, reason), timeout)
                )
                try:
                    value = function(*args, **kwargs)
                except Exception as exc:
                    self.report(approved.execution_id, succeeded=False,
                                output=f"{type(exc).__name__}: {exc}")  # fmt: skip
                    raise
                self.report(approved.execution_id, succeeded=True, output=value)
                return value

            return call  # type: ignore[return-value]

        return decorate


class AsyncAirlock:
    """``Airlock`` for asyncio: the same calls, awaited (and the same ``rate_limit_wait``)."""

    def __init__(
        self, url: str, token: str, timeout: float = 30.0, rate_limit_wait: float = RATE_LIMIT_WAIT
    ):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.rate_limit_wait = rate_limit_wait
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(token), timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAirlock:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _drive(self, flow: flows.Flow) -> Any:
        try:
            request = next(flow)
            while True:
                try:
                    answer = await self._send(request)
                except ApiError as refused:
                    request = flow.throw(refused)
                else:
                    request = flow.send(answer)
        except StopIteration as done:
            return done.value

    async def _send(self, request: flows.Request) -> dict[str, Any]:
        tries = _Tries()
        while True:
            try:
                got = await self._http.request(**_httpx_arguments(request, self.timeout))
            except httpx.HTTPError as exc:
                got = exc
            step = _settle(request, tries, got, self.url, self.rate_limit_wait)
            if not isinstance(step, float):  # the answer; a float is a pause
                return step
            await asyncio.sleep(step)

    async def propose(self, action: str, parameters: dict[str, Any], *, reason: str = "",
                      urgency: str = "normal", idempotency_key: str | None = None) -> Proposal:  # fmt: skip
        return await self._drive(
            flows.propose(action, parameters, reason, urgency, idempotency_key)
        )

    async def wait(self, proposal: Proposal | int, *, until: str = "decided",
                   timeout: float = 3600, withdraw_reason: str | None = None) -> Proposal:  # fmt: skip
        return await self._drive(flows.wait(proposal, until, timeout, withdraw_reason))

    async def withdraw(self, proposal_id: Proposal | int, reason: str = "") -> Proposal:
        """``Airlock.withdraw``: the pending proposal taken back, ``withdrawn``."""
        return await self._drive(flows.withdraw(proposal_id, reason))

    async def result(self, execution_id: int) -> Result:
        return await self._drive(flows.result(execution_id))

    async def run_script(self, code: str, *, language: str = "python", reason: str = "",
                         timeout: float = 3600) -> Result:  # fmt: skip
        return await self._drive(flows.run_script(code, language, reason, timeout))

    async def report(self, execution_id: int, *, succeeded: bool, output: Any = "") -> Result:
        return await self._drive(flows.report(execution_id, succeeded, output))

    def requires_approval(self, tool: str, *, reason: str | None = None,
                          timeout: float = 3600) -> Callable[[F], F]:  # fmt: skip
        """``Airlock.requires_approval`` for ``async def`` functions."""

        def decorate(function: F) -> F:
            if not inspect.iscoroutinefunction(function):
                raise TypeError(f"{function.__name__} is not async: use Airlock's decorator")

            @functools.wraps(function)
            async def call(*args, **kwargs):
                arguments = _arguments(function, args, kwargs)
                approved = await self._drive(
                    flows.tool_call(tool, arguments, _reason(function, reason), timeout)
                )
                try:
                    value = await function(*args, **kwargs)
                except Exception as exc:
                    await self.report(approved.execution_id, succeeded=False,
                                      output=f"{type(exc).__name__}: {exc}")  # fmt: skip
                    raise
                await self.report(approved.execution_id, succeeded=True, output=value)
                return value

            return call  # type: ignore[return-value]

        return decorate
