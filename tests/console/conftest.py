"""The console's cast and objects: a pending proposal, an execution, logged-in clients."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.models import Proposal
from executions.models import Execution
from tests.conftest import with_fresh_factor


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The cast is created per test; the real hasher costs seconds a test here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


_made = itertools.count(1)


def pending_proposal(agent, risk: int = 5, required: int = 1, age_minutes: int = 0, **fields):
    """A proposal held for review, made directly so the tests don't depend on the scorer."""
    now = timezone.now() - timedelta(minutes=age_minutes)
    values = {
        "agent": agent,
        "action": "script.execute",
        # Each its own code: identical proposals would be one queue row (approvals.review.grouping).
        "parameters": {
            "language": "python",
            "code": f"import os\nprint(os.listdir('.'))  # {next(_made)}\n",
        },
        "summary": "python: import os",
        "reason": "look around",
        "status": ProposalStatus.PENDING,
        "risk_score": risk,
        "risk_reasons": ["imports os (processes, files and environment)"],
        "decision_path": {
            "step": "review",
            "rule": None,
            "reason": f"risk {risk} needs a reviewer",
            "policy_version": 1,
            "notify": False,
        },
        "policy_version": 1,
        "required_approvals": required,
        "created_at": now,
        "expires_at": now + timedelta(minutes=60),
        **fields,
    }
    return Proposal.objects.create(**values)


@pytest.fixture
def proposal(agent):
    return pending_proposal(agent)


@pytest.fixture
def execution(agent):
    execution = Execution.objects.create(
        action="script.execute",
        parameters={"language": "python", "code": "print('hi')"},
        command_hash="0" * 64,
        requested_by="agent:requester",
    )
    pending_proposal(agent, status=ProposalStatus.APPROVED, execution=execution)
    return execution


def logged_in(user, stepped_up: bool = True) -> Client:
    """A browser of ``user``, signed in; ``stepped_up``: with a second factor proved just now."""
    client = Client()
    client.force_login(user)
    return with_fresh_factor(client, user) if stepped_up else client


@pytest.fixture
def reviewer_client(reviewer) -> Client:
    return logged_in(reviewer)


@pytest.fixture
def admin_client_(admin_user) -> Client:
    return logged_in(admin_user)
