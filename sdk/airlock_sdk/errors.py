"""Every way a call ends other than as asked, one exception each, with its reason."""

from __future__ import annotations

from airlock_sdk.types import Proposal, Result


class AirlockError(Exception):
    """Anything this package raises."""


class Unavailable(AirlockError):
    """Airlock did not answer (down, unreachable, too slow) or answered 5xx."""


class ApiError(AirlockError):
    """The API refused the call: ``status`` (400, 401, 403, 404, 409, 423, 429), ``type``
    and ``message`` as its error body says (``{"error": {"type", "message"}}``)."""

    def __init__(self, status: int, type: str, message: str):  # noqa: A002 - the API's name
        super().__init__(f"{status} {type}: {message}")
        self.status, self.type, self.message = status, type, message


class Paused(ApiError):
    """423 ``agent_paused``: an admin paused this agent (or its rejections in a row did).
    Every proposal is refused until an admin resumes it, so it is never sent again."""


class RateLimited(ApiError):
    """429, still refused when the client's ``rate_limit_wait`` was spent: ``type``
    ``too_many_pending`` (the agent's ``max_pending`` proposals wait for review) or
    ``rate_limited`` (past its ``max_proposals_per_minute``); ``retry_after``: the seconds
    the server last asked for (None if it named none)."""

    def __init__(self, status: int, type: str, message: str, retry_after: float | None = None):  # noqa: A002
        super().__init__(status, type, message)
        self.retry_after = retry_after


class Ended(AirlockError):
    """A proposal that will not run: ``proposal`` and the ``reason`` it ended so."""

    def __init__(self, proposal: Proposal):
        super().__init__(f"proposal #{proposal.id} {proposal.status}: {proposal.reason}")
        self.proposal = proposal
        self.reason = proposal.reason


class Denied(Ended):
    """The policy denied it (deny list, no capability)."""


class Rejected(Ended):
    """A reviewer rejected it."""


class Expired(Ended):
    """Nobody decided before it expired."""


class Withdrawn(Ended):
    """The agent withdrew it before a decision (``withdraw``, here or in another process);
    ``reason`` is the one it gave."""


class NotDecided(AirlockError):
    """Still pending when the caller's ``timeout`` ran out; ``proposal`` as it stood."""

    def __init__(self, proposal: Proposal, timeout: float):
        super().__init__(f"proposal #{proposal.id} was not decided in {timeout:g} s")
        self.proposal = proposal


class Failed(AirlockError):
    """It ran and did not succeed: ``result`` (exit code, output) and the ``reason``."""

    def __init__(self, result: Result):
        if result.status in ("queued", "running"):
            reason = f"still {result.status} when the wait ended"
        else:
            reason = result.error or (
                f"exit code {result.exit_code}" if result.exit_code is not None else result.status
            )
        super().__init__(f"execution #{result.execution_id} {result.status}: {reason}")
        self.result = result
        self.reason = reason


ENDED = {"denied": Denied, "rejected": Rejected, "expired": Expired, "withdrawn": Withdrawn}
