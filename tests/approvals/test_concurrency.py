"""Guarded transitions under real concurrency (PostgreSQL in the scale pass, SQLite otherwise)."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection

from accounts.roles import REVIEWERS_GROUP
from approvals.core.services import ProposalError, decide, submit
from approvals.models import Decision, Proposal
from executions.models import Execution

MEDIUM = {
    "action": "script.execute",
    "parameters": {"language": "python", "code": "import os\nprint(os.listdir('.'))"},
}


def race(callables) -> list:
    barrier = threading.Barrier(len(callables))
    results = [None] * len(callables)

    def attempt(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except ProposalError as exc:
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(i, c)) for i, c in enumerate(callables)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def pending_proposal(agent) -> Proposal:
    proposal = submit(agent, MEDIUM).proposal
    assert proposal.status == "pending" and proposal.required_approvals == 1, proposal.decision_path
    return proposal


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_approvals_make_exactly_one_execution(agent):
    group = Group.objects.create(name=REVIEWERS_GROUP)
    reviewers = []
    for n in range(20):
        user = get_user_model().objects.create_user(f"reviewer{n}")
        user.groups.add(group)
        reviewers.append(user)
    proposal = pending_proposal(agent)
    results = race([lambda u=u: decide(proposal.pk, u, "approve") for u in reviewers])
    winners = [r for r in results if isinstance(r, Proposal)]
    losers = [r for r in results if isinstance(r, ProposalError)]
    assert len(winners) == 1
    assert len(losers) == 19 and all(e.kind == "conflict" for e in losers)
    assert Execution.objects.count() == 1
    assert Decision.objects.count() == 1
    assert Proposal.objects.get(pk=proposal.pk).status == "approved"


@pytest.mark.django_db(transaction=True)
def test_one_reviewer_approving_twenty_times_at_once_counts_once(agent, reviewer):
    proposal = pending_proposal(agent)
    results = race([lambda: decide(proposal.pk, reviewer, "approve") for _ in range(20)])
    assert sum(isinstance(r, Proposal) for r in results) == 1
    assert Execution.objects.count() == 1
    assert Decision.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_approve_and_reject_leave_one_outcome(agent, reviewer, reviewer2):
    proposal = pending_proposal(agent)
    race(
        [
            lambda: decide(proposal.pk, reviewer, "approve"),
            lambda: decide(proposal.pk, reviewer2, "reject"),
        ]
    )
    proposal.refresh_from_db()
    assert proposal.status in ("approved", "rejected")
    assert Execution.objects.count() == (1 if proposal.status == "approved" else 0)
    assert Decision.objects.count() == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's row locks")
@pytest.mark.django_db(transaction=True)
def test_an_agent_held_for_admission_does_not_block_a_row_that_refers_to_it(agent):
    """A proposal being admitted locks its agent's row; a decision committing meanwhile checks
    its rows' references to that agent (FOR KEY SHARE at COMMIT, while holding the audit's
    append lock the admission waits for next). The admission's lock must not block that check,
    or the two deadlock and PostgreSQL fails one."""
    from django.db import transaction

    from approvals.guard import admission

    held, release = threading.Event(), threading.Event()

    def admit():
        try:
            with transaction.atomic():
                admission.locked(agent)
                held.set()
                release.wait(30)
        finally:
            connection.close()

    def refer():
        try:
            with transaction.atomic():
                Proposal.objects.create(agent=agent, action="script.execute", status="pending")
            return "committed"
        finally:
            connection.close()

    admitting = threading.Thread(target=admit)
    admitting.start()
    assert held.wait(10)
    outcome: list = []
    referring = threading.Thread(target=lambda: outcome.append(refer()))
    referring.start()
    referring.join(timeout=10)
    blocked = referring.is_alive()
    release.set()
    admitting.join(timeout=10)
    referring.join(timeout=10)
    assert not blocked, "a row referring to the agent waited for the admission's lock"
    assert outcome == ["committed"]
