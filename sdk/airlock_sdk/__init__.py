"""Airlock for agent builders: propose, wait, report, and any function behind approval.

    from airlock_sdk import Airlock, Rejected

    airlock = Airlock("https://airlock.example.com", token="alk_…")
    result = airlock.run_script("print('hi')", reason="smoke test")   # .stdout == "hi\\n"

    @airlock.requires_approval(tool="billing.refund")
    def refund(customer: str, amount: float) -> dict:
        ...   # runs only once a reviewer (or the policy) approved this very call

``AsyncAirlock`` is the same with ``await`` (and decorates ``async def``).
Every call speaks the published REST API (``/api/v1/schema/``) with httpx.

Owns the clients (``client``), the protocol they share, written once as
steps that yield requests (``flows``), the answers' types (``types``) and
the exceptions (``errors``). Imports nothing of Airlock's server.
"""

from airlock_sdk.client import Airlock, AsyncAirlock
from airlock_sdk.errors import (
    AirlockError,
    ApiError,
    Denied,
    Expired,
    Failed,
    NotDecided,
    Rejected,
    Unavailable,
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
    "Proposal",
    "Rejected",
    "Result",
    "Unavailable",
]
