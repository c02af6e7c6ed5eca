"""Airlock for agent builders: propose, wait, report, and any function behind approval.

    from airlock_sdk import Airlock, Rejected

    airlock = Airlock("https://airlock.example.com", token="alk_…")
    result = airlock.run_script("print('hi')", reason="smoke test")   # .stdout == "hi\\n"

    @airlock.requires_approval(tool="billing.refund")
    def refund(customer: str, amount: float) -> dict:
        ...   # runs only once a reviewer (or the policy) approved this very call

``AsyncAirlock`` is the same with ``await`` (and decorates ``async def``). A proposal
nobody needs any more is taken back with ``withdraw``; one the server refuses for now
(429: too many pending, or too fast) is sent again after its Retry-After, within the
client's ``rate_limit_wait``.
Every call speaks the published REST API (``/api/v1/schema/``) with httpx.

Owns the clients (``client``), the protocol they share, written once as
steps that yield requests (``flows``), the answers' types (``types``) and
the exceptions (``errors``); and the agent frameworks' approval hooks answered
by Airlock, each an optional extra that alone imports its framework
(``langgraph``, ``openai_agents``, ``pydantic_ai``). Imports nothing of
Airlock's server.
"""

from airlock_sdk.client import Airlock, AsyncAirlock
from airlock_sdk.errors import (
    AirlockError,
    ApiError,
    Denied,
    Expired,
    Failed,
    NotDecided,
    Paused,
    RateLimited,
    Rejected,
    Unavailable,
    Withdrawn,
)
from airlock_sdk.types import Proposal, Result

__all__ = [
    "Airlock",
    "AirlockError",
    "ApiError",
    "AsyncAirlock",
    "Denied",
    "Expired",
    "Failed",
    "NotDecided",
    "Paused",
    "Proposal",
    "RateLimited",
    "Rejected",
    "Result",
    "Unavailable",
    "Withdrawn",
]
