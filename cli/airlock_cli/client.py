"""The API client: one call, and every way it can fail as one line and a distinct exit code."""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass

import httpx

# Exit codes, as documented by ``airlock --help`` and the reviewers' guide.
OK = 0
FAILED = 1  # the API refused the input (a 400), or a run failed without an exit code
USAGE = 2  # a command used wrong (Click's own)
NOT_LOGGED_IN = 3
UNREACHABLE = 4  # the server is down, unreachable, too slow, or answered 5xx
TOKEN_REFUSED = 5  # 401: the token is revoked, expired or wrong
FORBIDDEN = 6  # 403: the token may not do this
NOT_FOUND = 7
CONFLICT = 8  # 409: already decided, no longer pending
STEP_UP_PENDING = 9  # a second factor was asked for and not given in time
DECIDED_AGAINST = 10  # the proposal was denied, rejected or expired
NOT_DECIDED = 11  # nobody decided within the time the command waited
CHAIN_BROKEN = 12  # the audit chain failed its check
PAUSED = 13  # 423: an admin paused the agent; its proposals are refused until resumed
RATE_LIMITED = 14  # 429: still refused (too many pending, or too fast) when the wait ran out

EXIT_CODES = {
    OK: "success",
    FAILED: "the API refused the input, or a run failed without an exit code",
    USAGE: "the command was used wrong",
    NOT_LOGGED_IN: "not logged in: run `airlock login URL`",
    UNREACHABLE: "the server is down or unreachable (or answered 5xx)",
    TOKEN_REFUSED: "the token was refused (revoked or expired)",
    FORBIDDEN: "the token may not do this",
    NOT_FOUND: "no such proposal or execution (or not yours to see)",
    CONFLICT: "already decided, or no longer pending",
    STEP_UP_PENDING: "a fresh second factor was needed and not given in time",
    DECIDED_AGAINST: "the proposal was denied, rejected, expired or withdrawn",
    NOT_DECIDED: "nobody decided in the time `airlock run --timeout` waited",
    CHAIN_BROKEN: "the audit chain is broken: a row was edited, inserted or deleted",
    PAUSED: "the agent is paused: an admin must resume it",
    RATE_LIMITED: "the agent has too many proposals pending, or proposes too fast",
}


class CliError(Exception):
    """One line for the person at the terminal, and the exit code for their script."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        error_type: str = "",
        url: str = "",
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.error_type = error_type
        self.url = url
        self.retry_after = retry_after  # seconds, from a 429's Retry-After


class StepUpRequired(CliError):
    pass


STATUS_CODES = {
    400: FAILED,
    401: TOKEN_REFUSED,
    403: FORBIDDEN,
    404: NOT_FOUND,
    409: CONFLICT,
    423: PAUSED,
    429: RATE_LIMITED,
}


@dataclass
class Api:
    url: str
    token: str
    timeout: float = 30.0

    def __post_init__(self):
        self.url = self.url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/json",
                "User-Agent": "airlock-cli/0.1",
            },
            timeout=self.timeout,
        )

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        json: dict | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        wait: float = 0,
    ) -> httpx.Response:
        """The answer of a 2xx; every other outcome raises ``CliError``."""
        headers = {}
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        params = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        try:
            response = self._http.request(
                method,
                f"/api/v1/{path.lstrip('/')}",
                params=params,
                json=json,
                content=content,
                headers=headers,
                timeout=self.timeout + wait,
            )
        except httpx.TimeoutException:
            raise CliError(UNREACHABLE, f"{self.url} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise CliError(UNREACHABLE, f"cannot reach {self.url}: {_reason(exc)}") from None
        if response.is_success:
            return response
        raise _error(self.url, response)

    def propose(self, body: dict, *, wait: float = 0, patience: float = 0) -> dict:
        """Make a proposal (``?wait=…&until=decided`` with ``wait``): its JSON.

        Refused for now (429: too many of the agent's proposals pending, or it proposes
        too fast), it is sent again after the server's Retry-After, said on standard
        error, the same proposal with the same idempotency key, while the waits add up
        to at most ``patience`` seconds; then, and at once for a paused agent (423),
        ``CliError``.
        """
        body = {**body, "idempotency_key": body.get("idempotency_key") or f"cli-{uuid.uuid4()}"}
        params = {"wait": wait, "until": "decided"} if wait else {}
        waited = 0.0
        while True:
            try:
                return self.call("POST", "proposals", params=params, json=body, wait=wait).json()
            except CliError as refused:
                if refused.code != RATE_LIMITED or refused.retry_after is None:
                    raise
                after = max(refused.retry_after, 1.0)  # a Retry-After of 0 still counts
                if waited + after > patience:
                    raise
                why = refused.message
            print(f"rate limited: retrying in {after:g} s ({why})", file=sys.stderr)
            time.sleep(after)
            waited += after

    def get(self, path: str, **params) -> dict:
        return self.call("GET", path, params=params).json()

    def post(self, path: str, body: dict | None = None, **params) -> dict:
        return self.call("POST", path, params=params, json=body or {}).json()


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    if "Connection refused" in text or "ConnectError" in type(exc).__name__:
        return "connection refused (is Airlock running there?)"
    return text


def _error(url: str, response: httpx.Response) -> CliError:
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    error_type = error.get("type", "")
    message = error.get("message") or f"HTTP {response.status_code}"
    if response.status_code == 401:
        return CliError(
            TOKEN_REFUSED,
            f"the token was refused ({message}); log in again with `airlock login {url}`",
            error_type=error_type,
        )
    if error_type == "step_up_required":
        return StepUpRequired(FORBIDDEN, message, error_type=error_type, url=error.get("url", ""))
    if response.status_code >= 500:
        return CliError(UNREACHABLE, f"{url} failed: {message}", error_type=error_type)
    code = STATUS_CODES.get(response.status_code, FAILED)
    return CliError(
        code,
        message,
        error_type=error_type,
        url=error.get("url", ""),
        retry_after=_retry_after(response),
    )


def _retry_after(response: httpx.Response) -> float | None:
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def fail(error: CliError) -> None:
    """Print the one line and exit with the error's code."""
    print(f"airlock: {error.message}", file=sys.stderr)
    if error.url and not isinstance(error, StepUpRequired):
        print(f"  {error.url}", file=sys.stderr)
    sys.exit(error.code)
