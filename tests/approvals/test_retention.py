"""Retention of proposals and audit records: archived a day per file, then out of the database,
nothing lost, and the audit chain provable across the archive and the database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from approvals.models import Decision, Proposal
from approvals.notify.models import Delivery, ReviewLink, SlackMessage, Webhook, WebhookDelivery
from approvals.retention import passes, proposals
from audit import archive as audit_archive
from audit.models import AuditEvent, ChainArchive, SinkPosition
from audit.services import record, verify_chain
from executions.models import Execution, OutputChunk
from infrastructure.archive import Archive, delete_set

pytestmark = pytest.mark.django_db(transaction=True)
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def archive(tmp_path, settings):
    settings.RETENTION_ARCHIVE = str(tmp_path / "archive")
    return Archive(settings.RETENTION_ARCHIVE)


def decided(agent, reviewer, days_ago: float, status="approved", ran=True) -> Proposal:
    at = NOW - timedelta(days=days_ago)
    execution = None
    if ran:
        execution = Execution.objects.create(
            action="script.execute", command_hash="0" * 64, status="succeeded", finished_at=at
        )
        OutputChunk.objects.create(execution=execution, seq=1, stream="stdout", data="hello\n")
    proposal = Proposal.objects.create(
        agent=agent, action="script.execute", summary=f"run {days_ago}", reason="why",
        status=status, execution=execution, decided_at=at, created_at=at - timedelta(minutes=5),
    )  # fmt: skip
    Decision.objects.create(proposal=proposal, reviewer=reviewer, kind="approve", comment="ok")
    return proposal


def test_finished_proposals_leave_after_their_output_with_everything_they_showed(
    archive, agent, reviewer, capsys
):
    old = decided(agent, reviewer, 40)
    rejected = decided(agent, reviewer, 41, status="rejected", ran=False)
    recent = decided(agent, reviewer, 2)
    pending = Proposal.objects.create(agent=agent, action="script.execute", summary="p", reason="r")
    Proposal.objects.filter(pk=pending.pk).update(created_at=NOW - timedelta(days=90))
    execution_id = old.execution_id

    said = passes.run(passes.Keep(output=30, proposals=30, audit=None), archive, now=NOW)

    assert said[0].endswith("1 executions, 1 chunks archived and removed")
    assert said[1].endswith("2 archived and removed")
    assert set(Proposal.objects.values_list("pk", flat=True)) == {recent.pk, pending.pk}
    assert not Execution.objects.filter(pk=execution_id).exists()
    assert not Decision.objects.filter(proposal_id__in=[old.pk, rejected.pk]).exists()
    line = proposals.archived(archive, proposal=old.pk)
    assert line["agent"] == agent.name and line["status"] == "approved"
    assert line["decisions"][0]["reviewer__username"] == reviewer.username
    assert line["execution"]["id"] == execution_id and line["execution"]["status"] == "succeeded"
    assert proposals.archived(archive, proposal=rejected.pk)["execution"] is None
    kinds = AuditEvent.objects.filter(verb="retention.archived").values_list(
        "data__kind", flat=True
    )
    assert sorted(kind or "output" for kind in kinds) == ["output", "proposals", "proposals"]

    call_command("retention", "--output", str(execution_id))  # its row is gone: found by proposal
    assert capsys.readouterr().out == "hello\n"
    call_command("retention", "--proposal", str(old.pk))
    assert f'"id": {old.pk}' in capsys.readouterr().out
    with pytest.raises(CommandError, match=f"proposal {recent.pk} is in the database"):
        call_command("retention", "--proposal", str(recent.pk))
    with pytest.raises(CommandError, match="there is no proposal 999999"):
        call_command("retention", "--proposal", "999999")


def _plain(row: dict) -> dict:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def test_an_archived_line_holds_what_the_rows_read_through_django_give(agent, reviewer):
    """Lines are written from plain SQL, the JSON columns as stored: each holds what
    ``values()`` reads (times in ISO 8601 with their offset, JSON as JSON, flags as flags)."""
    proposal = decided(agent, reviewer, 40)
    Decision.objects.filter(proposal=proposal).update(comment='a "b"\n')
    Proposal.objects.filter(pk=proposal.pk).update(
        parameters={"script": "echo 'hi'\nexit 3", "n": [1, 2.5, None, True], "ü": {"k": "\u2028"}},
        risk_reasons=["one", "two"], routing={}, expires_at=NOW.replace(microsecond=120034),
        escalate_at=NOW.replace(microsecond=500000),
    )  # fmt: skip
    Execution.objects.filter(pk=proposal.execution_id).update(
        timed_out=True, truncated=False, details={"a": [None]}, exit_code=3, limits={"cpu": 1.5}
    )
    bare = decided(agent, reviewer, 41, status="rejected", ran=False)

    lines = [json.loads(line) for line in proposals._lines([proposal.pk, bare.pk])]

    for line, row in zip(lines, (proposal, bare), strict=True):
        decisions = Decision.objects.filter(proposal=row).order_by("pk")
        execution = Execution.objects.filter(pk=row.execution_id).values()
        assert line == {
            **_plain(Proposal.objects.filter(pk=row.pk).values().get()),
            "agent": agent.name,
            "decisions": [
                _plain(d)
                for d in decisions.values("reviewer__username", "kind", "comment", "created_at")
            ],
            "execution": _plain(execution.get()) if row.execution_id else None,
        }
    assert lines[0]["execution"]["timed_out"] is True and lines[0]["expires_at"].endswith(
        ".120034+00:00"
    )


def test_a_pass_whose_deletes_fail_stops_there_and_the_next_one_finishes(
    archive, agent, reviewer, monkeypatch
):
    """A day's deletes run in a thread of their own while the next day's file is written: a
    failure there stops the pass with its error before a later day loses a row, and the next
    pass archives what is left, each proposal once."""
    made = [decided(agent, reviewer, days) for days in (45, 44, 43)]
    real, calls = proposals.delete_set, []

    def failing(model, pks):
        if model is Proposal:
            calls.append(pks)
            if len(calls) == 2:
                raise OSError("disk full")
        return real(model, pks)

    monkeypatch.setattr(proposals, "delete_set", failing)
    with pytest.raises(OSError, match="disk full"):
        passes.run(passes.Keep(output=30, proposals=30, audit=None), archive, now=NOW)
    assert sorted(Proposal.objects.values_list("pk", flat=True)) == [made[1].pk, made[2].pk]

    monkeypatch.setattr(proposals, "delete_set", real)
    passes.run(passes.Keep(output=30, proposals=30, audit=None), archive, now=NOW)
    assert not Proposal.objects.exists() and not Execution.objects.exists()
    archived = [
        line["id"] for day in archive.days("proposals") for line in archive.lines("proposals", day)
    ]
    assert sorted(archived) == [proposal.pk for proposal in made]


def test_a_pass_inside_a_transaction_deletes_in_it(archive, agent, reviewer):
    """Inside a transaction the deletes stay on its connection: a thread's own would not see
    its rows, and on SQLite would wait for its writer lock forever."""
    old = decided(agent, reviewer, 40)
    with transaction.atomic():
        Proposal.objects.filter(pk=old.pk).update(reason="changed in this transaction")
        passes.run(passes.Keep(output=30, proposals=30, audit=None), archive, now=NOW)
        assert not Proposal.objects.filter(pk=old.pk).exists()
    assert proposals.archived(archive, proposal=old.pk)["reason"] == "changed in this transaction"


def test_a_proposal_whose_output_is_kept_stays_too(archive, agent, reviewer):
    kept = decided(agent, reviewer, 40)
    passes.run(passes.Keep(output=None, proposals=30, audit=None), archive, now=NOW)
    assert Proposal.objects.filter(pk=kept.pk).exists()
    assert OutputChunk.objects.filter(execution_id=kept.execution_id).exists()


def test_proposal_retention_shorter_than_output_retention_is_refused_at_start(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "AIRLOCK_DATA_DIR": str(tmp_path), "RETENTION_DAYS": "90"}
    env["RETENTION_PROPOSAL_DAYS"] = "30"
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True
    )
    assert (
        done.returncode
        and "RETENTION_PROPOSAL_DAYS=30 needs RETENTION_DAYS from 1 to it" in done.stderr
    )


def audit_history(days: int = 5) -> None:
    """Records spread over ``days`` days before NOW (times as if written then), with the ones
    already there (the fixtures') first: times follow the chain's order, as they do."""
    for n in range(days * 3):
        with transaction.atomic():
            record("system", "test.happened", None, n=n)
    for n, event in enumerate(AuditEvent.objects.order_by("seq")):
        AuditEvent.objects.filter(pk=event.pk).update(
            created_at=NOW - timedelta(days=days + 1, hours=-8 * n)
        )
    # The times were changed after hashing: re-chain so that the history verifies as written.
    rechain()


def rechain() -> None:
    from django.conf import settings

    from audit.services import GENESIS, _digester

    digest, prev = _digester(settings.SECRET_KEY), GENESIS
    for event in AuditEvent.objects.order_by("seq"):
        event.prev_hash = prev
        event.hash = prev = digest(prev, event.seq, event.created_at.isoformat(), event.actor,
                                   event.verb, event.object_type, event.object_id, event.data)  # fmt: skip
        event.save(update_fields=["prev_hash", "hash"])


def test_audit_records_move_to_the_archive_and_the_chain_verifies_across_both(archive, capsys):
    audit_history()
    total = AuditEvent.objects.count()
    head = AuditEvent.objects.order_by("-seq").first()

    summary = audit_archive.run(2, archive, now=NOW)

    through, through_hash = audit_archive.archived_through()
    assert summary.records == through > 0 and len(summary.days) >= 3
    assert not AuditEvent.objects.filter(seq__lte=through).exists()
    first_kept = AuditEvent.objects.order_by("seq").first()
    assert first_kept.seq == through + 1 and first_kept.prev_hash == through_hash
    assert AuditEvent.objects.filter(seq=head.seq).exists()  # the end stays
    assert verify_chain().ok and verify_chain().checked == AuditEvent.objects.count()
    assert audit_archive.verify_archived(archive).ok
    assert audit_archive.verify_archived(archive).checked == through
    assert through + AuditEvent.objects.count() == total + len(summary.days)  # + the pass's own

    call_command("verify_audit")
    assert f"rows 1–{through} were moved to the archive" in capsys.readouterr().out
    call_command("verify_audit", "--archive")
    assert f"archived rows intact: {through} rows" in capsys.readouterr().out
    with transaction.atomic():
        record("system", "test.after")  # appends follow the chain as ever
    assert verify_chain().ok


def test_an_edited_or_missing_archived_record_is_caught(archive, tmp_path):
    import gzip
    import json

    audit_history()
    audit_archive.run(2, archive, now=NOW)
    day = archive.days("audit")[0]
    path = archive.store.root / archive.name("audit", day)
    with gzip.open(path, "rt") as handle:
        lines = [json.loads(line) for line in handle]
    lines[1]["actor"] = "user:mallory"
    # The attacker rewrites the file and its manifest entry: the checksum no longer helps.
    from infrastructure.files import sha256_of

    with gzip.open(path, "wt") as out:
        out.writelines(json.dumps(line) + "\n" for line in lines)
    manifest = archive.manifest()
    manifest["files"][archive.name("audit", day)]["sha256"] = sha256_of(path)
    archive.store.write_bytes("manifest.json", json.dumps(manifest).encode())
    report = audit_archive.verify_archived(archive)
    assert not report.ok and report.problem == f"archived row {lines[1]['seq']} was edited"
    with pytest.raises(CommandError, match="broken in the archive at row"):
        call_command("verify_audit", "--archive")

    ChainArchive.objects.update(through_seq=ChainArchive.objects.get().through_seq + 5)
    assert not verify_chain().ok  # the database no longer follows where the archive says it ends


def test_records_a_sink_has_not_acknowledged_stay_in_the_database(archive, settings):
    audit_history()
    settings.AUDIT_SINKS = ["stdout:"]
    from audit.shipping.ship import configured

    SinkPosition.objects.create(name=configured()[0].name, seq=4)
    audit_archive.run(2, archive, now=NOW)
    assert audit_archive.archived_through()[0] == 4
    assert AuditEvent.objects.order_by("seq").first().seq == 5


def test_a_pass_stopped_after_the_file_deletes_the_rest_next_time(archive):
    audit_history()
    audit_archive.run(2, archive, now=NOW)
    through, _ = audit_archive.archived_through()
    # As if it stopped between moving the mark and deleting: rows up to the mark are back.
    restored = [
        AuditEvent(**{k: v for k, v in line.items() if k != "created_at"},
                   created_at=datetime.fromisoformat(line["created_at"]))
        for day in archive.days("audit") for line in archive.lines("audit", day)
    ]  # fmt: skip
    AuditEvent.objects.bulk_create(restored[-3:])
    assert verify_chain().ok  # what is before the mark is not the database's part
    audit_archive.run(2, archive, now=NOW)
    assert not AuditEvent.objects.filter(seq__lte=through).exists()


def test_the_command_runs_every_kind(archive, agent, reviewer, settings, capsys):
    audit_history()
    decided(agent, reviewer, (timezone.now() - NOW).days + 40)
    call_command("retention", "--days", "30", "--audit-days", "1")
    out = capsys.readouterr().out
    assert "1 executions, 1 chunks archived" in out and "1 archived and removed" in out
    assert "moved to the archive (the database's part now starts after #" in out
    call_command("retention", "--check")
    assert "archive intact" in capsys.readouterr().out


def test_the_page_of_an_archived_proposal_says_where_it_went(archive, agent, reviewer, settings):
    from django.test import Client

    from tests.conftest import with_fresh_factor

    old = decided(agent, reviewer, 40)
    execution_id = old.execution_id
    passes.run(passes.Keep(output=30, proposals=30, audit=None), archive, now=NOW)
    client = Client()
    client.force_login(reviewer)
    client = with_fresh_factor(client, reviewer)
    settings.RETENTION_PROPOSAL_DAYS = 30
    page = client.get(f"/proposals/{old.pk}/")
    assert page.status_code == 404
    assert f"manage.py retention --proposal {old.pk}" in page.content.decode()
    page = client.get(f"/executions/{execution_id}/")
    assert page.status_code == 404
    assert f"manage.py retention --output {execution_id}" in page.content.decode()
    settings.RETENTION_PROPOSAL_DAYS = 0
    assert "archived-hint" not in client.get(f"/proposals/{old.pk}/").content.decode()


def test_checkpoints_older_than_the_database_part_are_proved_against_the_archive(
    archive, tmp_path, settings, capsys
):
    from audit import checkpoints

    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "signing.pem")
    settings.AUDIT_CHECKPOINT_FILE = str(tmp_path / "checkpoints.jsonl")
    (tmp_path / "public.pem").write_text(
        checkpoints.public_pem(checkpoints.new_key(tmp_path / "signing.pem"))
    )
    audit_history()
    early = checkpoints.sign_head()  # signed before the records it names are moved
    with transaction.atomic():
        record("system", "test.later")
    audit_archive.run(0, archive, now=timezone.now() + timedelta(days=2))  # all but the end
    assert early.seq <= audit_archive.archived_through()[0]
    args = ["--checkpoints", str(tmp_path / "checkpoints.jsonl"), "--public-key",
            str(tmp_path / "public.pem")]  # fmt: skip
    with pytest.raises(CommandError, match="name rows moved to the archive: pass --archive"):
        call_command("verify_audit", *args)
    call_command("verify_audit", *args, "--archive")
    assert "checkpoints hold: 1 signed" in capsys.readouterr().out

    # Someone with the database, the archive and the chain's key rewrites the archived row the
    # checkpoint names and everything after it: the chain verifies, the checkpoint does not.
    import gzip
    import json

    from audit.services import _digester
    from infrastructure.files import sha256_of

    digest, prev = _digester(settings.SECRET_KEY), None
    for day in archive.days("audit"):
        name = archive.name("audit", day)
        lines = list(archive.lines("audit", day))
        if not any(line["seq"] >= early.seq for line in lines):
            prev = lines[-1]["hash"]
            continue
        for line in lines:
            if line["seq"] >= early.seq:
                if line["seq"] == early.seq:
                    line["data"] = {"n": "rewritten"}
                line["prev_hash"] = prev
                line["hash"] = digest(prev, line["seq"], line["created_at"], line["actor"],
                                      line["verb"], line["object_type"], line["object_id"],
                                      line["data"])  # fmt: skip
            prev = line["hash"]
        path = archive.store.root / name
        with gzip.open(path, "wt") as out:
            out.writelines(json.dumps(line) + "\n" for line in lines)
        manifest = archive.manifest()
        manifest["files"][name]["sha256"] = sha256_of(path)
        archive.store.write_bytes("manifest.json", json.dumps(manifest).encode())
    ChainArchive.objects.update(through_hash=prev)
    for event in AuditEvent.objects.order_by("seq"):
        event.prev_hash = prev
        event.hash = prev = digest(prev, event.seq, event.created_at.isoformat(), event.actor,
                                   event.verb, event.object_type, event.object_id, event.data)  # fmt: skip
        event.save(update_fields=["prev_hash", "hash"])
    call_command("verify_audit", "--archive")  # the rewritten chain holds together
    with pytest.raises(CommandError, match=f"row {early.seq} is not the one signed"):
        call_command("verify_audit", *args, "--archive")


def test_one_pass_at_a_time(archive, agent, reviewer):
    from django.core.cache import cache

    old = decided(agent, reviewer, 40)
    cache.add(passes.LOCK, "a worker's pass", 60)
    try:
        with pytest.raises(CommandError, match="another retention pass is running"):
            call_command("retention", "--days", "30")
        assert Proposal.objects.filter(pk=old.pk).exists()
    finally:
        cache.delete(passes.LOCK)
    call_command("retention", "--days", "30")
    assert not Proposal.objects.filter(pk=old.pk).exists() and cache.get(passes.LOCK) is None


def test_a_proposal_leaves_with_what_refers_to_it_as_each_reference_says(agent, reviewer):
    """delete_set: a statement per table, with Django's on_delete rules, no row read."""
    kept = decided(agent, reviewer, 40)
    gone = decided(agent, reviewer, 40)
    webhook = Webhook.objects.create(name="ops", url="https://hooks.example/x", secret="s")
    for proposal in (kept, gone):
        ReviewLink.objects.create(
            nonce=f"n{proposal.pk}", reviewer=reviewer, proposal=proposal, command_hash="0" * 64,
            expires_at=NOW,
        )  # fmt: skip
        SlackMessage.objects.create(proposal=proposal, event="e", channel="C1", ts=f"{proposal.pk}")
        Delivery.objects.create(event="e", proposal=proposal, channel="email", operation="send",
                                target="a@example.com")  # fmt: skip
        WebhookDelivery.objects.create(event="e", proposal=proposal, webhook=webhook, body="{}")
    with transaction.atomic(), pytest.raises(ProtectedError):  # a proposal still refers to it
        delete_set(Execution, [gone.execution_id])
    assert Execution.objects.filter(pk=gone.execution_id).exists()

    with transaction.atomic():
        delete_set(Proposal, [gone.pk])
        delete_set(Execution, [gone.execution_id])
    assert list(Proposal.objects.values_list("pk", flat=True)) == [kept.pk]
    assert list(Execution.objects.values_list("pk", flat=True)) == [kept.execution_id]
    assert list(OutputChunk.objects.values_list("execution_id", flat=True)) == [kept.execution_id]
    for model in (Decision, ReviewLink, SlackMessage):
        assert list(model.objects.values_list("proposal_id", flat=True)) == [kept.pk], model
    for model in (Delivery, WebhookDelivery):  # the delivery logs stay, without the proposal
        assert sorted(model.objects.values_list("proposal_id", flat=True), key=str) == [
            kept.pk, None
        ], model  # fmt: skip
    delete_set(Proposal, [])  # nothing asked, nothing done
