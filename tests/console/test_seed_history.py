"""seed_history makes a history Airlock can be measured on: realistic shares, a chain that verifies."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count

from approvals.models import Decision, Proposal
from audit.models import AuditEvent
from audit.services import verify_chain
from executions.models import Execution, OutputChunk

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_seeded_history_has_every_fate_and_its_audit_chain_verifies(capsys):
    call_command("seed_history", "300", "--days", "30", "--chunks", "2")
    shares = dict(Proposal.objects.values_list("status").annotate(n=Count("id")))
    assert shares == {"pending": 3, "approved": 210, "rejected": 45, "expired": 30, "denied": 12}
    assert (
        Execution.objects.count() == 210 == Proposal.objects.filter(execution__isnull=False).count()
    )
    assert OutputChunk.objects.count() == 420
    assert Decision.objects.count() == 45 + 105  # the rejections, and the approvals by a person
    assert AuditEvent.objects.count() == 300 + 297 + 210  # submitted, decided, finished
    assert verify_chain().ok

    with pytest.raises(CommandError, match="already holds proposals: pass --add"):
        call_command("seed_history", "10")
    call_command("seed_history", "10", "--add")
    assert Proposal.objects.count() == 310 and verify_chain().ok
