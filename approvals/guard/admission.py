"""Whether an agent may make one more proposal now: its pause, ``max_pending``, its bucket.

``check`` runs twice for a proposal: before the work of assessing it, on the
agent's row as authentication read it (a flood is turned away cheaply), and
again inside the transaction that inserts it, on the row locked
(``select_for_update``: one agent's proposals are admitted one at a time, so
``max_pending`` holds exactly however many processes take them). Only the
second spends a token of the bucket, written in that same transaction: a
proposal that is not made spends nothing.

The lock is PostgreSQL's FOR NO KEY UPDATE, not FOR UPDATE: a transaction
that wrote a row referencing the agent (a decision's execution, an outbox
row) checks that reference at COMMIT with FOR KEY SHARE on the agent's row,
which FOR UPDATE blocks. It may hold the audit's append lock by then, which
the admitting transaction waits for next: a deadlock, each answered 503.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Min

from approvals.choices import ProposalStatus
from approvals.models import Agent, Proposal
from approvals.policy.rules import Policy
from audit.services import actor_label, record

# A refusal this long after the last one starts a new burst, whose first refusal is audited.
BURST_GAP = timedelta(minutes=1)
# Counts of refusals are written at most this often per process (a flood writes nothing else).
COUNT_EVERY_SECONDS = 1.0
COUNTERS = {
    "agent_paused": "refused_paused",
    "too_many_pending": "refused_pending",
    "rate_limited": "refused_rate",
}


@dataclass
class Refused(Exception):
    """A proposal an agent may not make now: ``kind`` is the API's error type."""

    kind: str
    message: str
    status: int
    retry_after: int | None = None

    def __str__(self) -> str:
        return self.message


def check(agent: Agent, policy: Policy, now: datetime, *, spend: bool) -> None:
    """Raise ``Refused`` unless ``agent`` may propose now; with ``spend``, take a token.

    ``agent`` is a row as read (``spend=False``) or, inside the transaction that
    will insert the proposal, locked and read again (``spend=True``: use ``locked``).
    """
    memo = None if spend else _refusing.get(agent.token_hash)
    if memo is not None and time.monotonic() < memo[0]:
        raise memo[1]
    if agent.paused_at is not None:
        raise Refused(
            "agent_paused",
            f"agent {agent.name} is paused since {agent.paused_at:%Y-%m-%d %H:%M:%S} UTC "
            f"({agent.pause_reason or 'no reason given'}); an admin must resume it",
            423,
        )
    pending = _pending(agent, policy.max_pending)
    if pending >= policy.max_pending:
        raise Refused(
            "too_many_pending",
            f"agent {agent.name} has {pending} proposals waiting for review, its limit "
            f"(max_pending {policy.max_pending}); withdraw some or wait for decisions",
            429,
            _until_one_ends(agent, now),
        )
    tokens = _tokens(agent, policy.max_proposals_per_minute, now)
    if tokens < 1:
        rate = policy.max_proposals_per_minute / 60
        raise Refused(
            "rate_limited",
            f"agent {agent.name} proposes faster than its limit "
            f"(max_proposals_per_minute {policy.max_proposals_per_minute})",
            429,
            max(1, math.ceil((1 - tokens) / rate)),
        )
    if spend:
        Agent.objects.filter(pk=agent.pk).update(bucket_tokens=tokens - 1, bucket_at=now)


def locked(agent: Agent) -> Agent:
    """The agent's row, locked until the transaction ends (call inside it)."""
    assert transaction.get_connection().in_atomic_block
    return Agent.objects.select_for_update(no_key=True).get(pk=agent.pk)


def _pending(agent: Agent, limit: int) -> int:
    # Counted up to the limit only: the partial index proposal_agent_pending holds them.
    rows = Proposal.objects.filter(agent=agent, status=ProposalStatus.PENDING).order_by()
    return rows[:limit].count()


def _until_one_ends(agent: Agent, now: datetime) -> int:
    soonest = (
        Proposal.objects.filter(agent=agent, status=ProposalStatus.PENDING)
        .order_by()
        .aggregate(soonest=Min("expires_at"))["soonest"]
    )
    seconds = (soonest - now).total_seconds() if soonest else 60
    return min(60, max(1, math.ceil(seconds)))


def _tokens(agent: Agent, per_minute: int, now: datetime) -> float:
    """Tokens in the agent's bucket now: full at first, refilled at per_minute / 60 a second."""
    if agent.bucket_tokens is None or agent.bucket_at is None:
        return float(per_minute)
    elapsed = max((now - agent.bucket_at).total_seconds(), 0.0)
    return min(float(per_minute), agent.bucket_tokens + elapsed * per_minute / 60)


# A refusal of its limits is remembered this long (per process, at most until its
# Retry-After): a flood's next proposals are turned away without a query. A withdrawal or a
# decision in this process forgets it at once; elsewhere it lasts this long at most.
MEMO_SECONDS = 0.5
_refusing: dict[str, tuple[float, Refused, int]] = {}  # token hash → (until, refusal, agent)


def forget(agent: Agent) -> None:
    """A place may have freed (a withdrawal, a decision): check the agent afresh."""
    _refusing.pop(agent.token_hash, None)


def remembered(token_hash: str) -> Refused | None:
    """The refusal this process gave the agent of this token moments ago, if it still holds,
    counted again (for ``approvals.agents.door``: a flood turned away before Django)."""
    memo = _refusing.get(token_hash)
    if memo is None or time.monotonic() >= memo[0]:
        return None
    with _lock:
        key = (memo[2], COUNTERS[memo[1].kind])
        _uncounted[key] = _uncounted.get(key, 0) + 1
    return memo[1]


# --- refusals: counted, the first of a burst audited ------------------------------------

_lock = threading.Lock()
_uncounted: dict[tuple[int, str], int] = {}
_last_refused: dict[int, datetime] = {}  # not written yet
_seen_refused: dict[str, datetime] = {}  # the last refusal of each agent this process saw
_counted_at = 0.0


def refused(agent: Agent, refusal: Refused, now: datetime) -> None:
    """Count a refusal and audit the first of a burst; what it writes, it writes at most
    once a second per process (and once per burst), so a flood costs reads only."""
    if refusal.retry_after is not None:
        hold = min(MEMO_SECONDS, refusal.retry_after)
        _refusing[agent.token_hash] = (time.monotonic() + hold, refusal, agent.pk)
    with _lock:
        key = (agent.pk, COUNTERS[refusal.kind])
        _uncounted[key] = _uncounted.get(key, 0) + 1
        previous = _seen_refused.get(agent.token_hash)  # (a token is never reused)
        _last_refused[agent.pk] = _seen_refused[agent.token_hash] = now
        due = time.monotonic() - _counted_at >= COUNT_EVERY_SECONDS
    if due:
        flush_counts()
    if previous is not None and now - previous < BURST_GAP:
        return  # this process saw the burst already: whoever began it audited it
    last = Agent.objects.filter(pk=agent.pk).values_list("refused_at", flat=True).first()
    if last is not None and now - last < BURST_GAP:
        return
    starts_burst = Agent.objects.filter(pk=agent.pk, refused_at=last).update(refused_at=now)
    if starts_burst:  # this process saw the burst start first
        record(
            actor_label(agent),
            "agent.refused",
            agent,
            reason=refusal.kind,
            message=refusal.message,
            burst_gap_seconds=int(BURST_GAP.total_seconds()),
        )


def flush_counts() -> None:
    """Write the refusals this process counted and has not written yet."""
    global _counted_at
    with _lock:
        batch, last = dict(_uncounted), dict(_last_refused)
        _uncounted.clear()
        _last_refused.clear()
        _counted_at = time.monotonic()
    for (pk, column), n in batch.items():
        Agent.objects.filter(pk=pk).update(**{column: F(column) + n})
    for pk, when in last.items():
        Agent.objects.filter(pk=pk, refused_at__lt=when).update(refused_at=when)
