"""seed_history makes a history Airlock can be measured on: realistic shares, a chain that verifies."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.db.models import Count, Max

from approvals.models import Decision, Proposal
from audit.models import AuditEvent
from audit.services import record, verify_chain
from executions.models import Execution, OutputChunk

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_seeded_history_has_every_fate_and_its_audit_chain_verifies(capsys):
    call_command("seed_history", "300", "--days", "30", "--chunks", "2")
    shares = dict(Proposal.objects.values_list("status").annotate(n=Count("id")))
    # Unreviewed ones older than the review timeout (an hour) were expired: here, all of them.
    assert shares == {"approved": 210, "rejected": 45, "expired": 33, "denied": 12}
    assert (
        Execution.objects.count() == 210 == Proposal.objects.filter(execution__isnull=False).count()
    )
    assert OutputChunk.objects.count() == 420
    assert Decision.objects.count() == 45 + 105  # the rejections, and the approvals by a person
    assert AuditEvent.objects.count() == 300 + 300 + 210  # submitted, decided, finished
    assert verify_chain().ok

    with pytest.raises(CommandError, match="already holds proposals: pass --add"):
        call_command("seed_history", "10")
    call_command("seed_history", "10", "--add")
    assert Proposal.objects.count() == 310 and verify_chain().ok


def test_rows_made_after_a_seed_take_new_ids_and_the_seeded_ones_are_searchable():
    call_command("seed_history", "50", "--days", "5")
    seeded = Proposal.objects.order_by("pk").last()
    execution = Execution.objects.create(action="script.execute", requested_by="agent:x")
    chunk = OutputChunk.objects.create(execution=execution, seq=1, stream="stdout", data="x")
    proposal = Proposal.objects.create(
        agent=seeded.agent,
        action="script.execute",
        summary="after",
        reason="after",
        status="pending",
    )
    assert proposal.pk > seeded.pk
    assert execution.pk > Execution.objects.exclude(pk=execution.pk).aggregate(top=Max("pk"))["top"]
    assert chunk.pk > OutputChunk.objects.exclude(pk=chunk.pk).aggregate(top=Max("pk"))["top"]
    with transaction.atomic():
        event = record("system", "seed.checked")
    assert event.seq == AuditEvent.objects.count() and verify_chain().ok
    Proposal.text_index.catch_up()
    found = Proposal.objects.filter(Proposal.text_index.matching("routine check 17"))
    assert list(found.values_list("reason", flat=True)) == ["routine check 17"]
