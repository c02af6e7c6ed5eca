"""The audit trail is a keyed hash chain; verify_audit finds the first tampered row."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from audit.services import record, verify_chain


@pytest.fixture
def chain(db):
    for n in range(6):
        record("system", "test.event", None, n=n)
    return list(AuditEvent.objects.order_by("seq"))


def test_an_untouched_chain_verifies(chain, capsys):
    assert verify_chain().ok
    call_command("verify_audit")
    assert "6 rows verified" in capsys.readouterr().out


@pytest.mark.parametrize(
    "column, value",
    [("actor", "user:mallory"), ("verb", "test.other"), ("data", '{"n": 99}'), ("object_id", "7")],
)
def test_editing_any_column_is_reported_at_that_row(chain, column, value):
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE audit_auditevent SET {column} = %s WHERE seq = 3", [value])
    report = verify_chain()
    assert (report.ok, report.first_bad_seq) == (False, 3)
    with pytest.raises(CommandError, match="row 3"):
        call_command("verify_audit")


def test_editing_a_timestamp_is_reported(chain):
    AuditEvent.objects.filter(seq=2).update(created_at=chain[0].created_at)
    assert verify_chain().first_bad_seq == 2


def test_deleting_a_row_is_reported(chain):
    AuditEvent.objects.filter(seq=4).delete()
    report = verify_chain()
    assert (report.ok, report.first_bad_seq) == (False, 4)
    assert "deleted" in report.problem


def test_inserting_a_row_is_reported(chain):
    AuditEvent.objects.filter(seq__gte=4).update(seq=models_shift())
    forged = chain[2]
    AuditEvent.objects.create(
        seq=4,
        created_at=forged.created_at,
        actor="user:mallory",
        verb="test.event",
        data={},
        prev_hash=forged.hash,
        hash="f" * 64,
    )
    assert verify_chain().first_bad_seq == 4


def models_shift():
    from django.db.models import F

    return F("seq") + 100


def test_recomputing_the_chain_without_the_key_does_not_help(chain, settings):
    import hashlib

    row = chain[1]
    row.actor = "user:mallory"
    row.hash = hashlib.sha256(b"anything").hexdigest()
    row.save()
    assert verify_chain().first_bad_seq == 2


def chain_reads(queries) -> list:
    return [q for q in queries if "audit_auditevent" in q["sql"] and "SELECT" in q["sql"][:10]]


@pytest.mark.django_db(transaction=True)
def test_appends_in_one_transaction_read_the_chain_end_once():
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        for verb in ("one", "two", "three"):
            record("test", verb)
    assert len(chain_reads(captured)) == 1
    locks = [q for q in captured if "pg_advisory_xact_lock" in q["sql"]]
    assert len(locks) == (1 if connection.vendor == "postgresql" else 0)
    assert list(AuditEvent.objects.order_by("seq").values_list("seq", "verb")) == [
        (1, "one"),
        (2, "two"),
        (3, "three"),
    ]
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        record("test", "four")  # a new transaction: the end is read again
    assert len(chain_reads(captured)) == 1
    assert verify_chain().ok


@pytest.mark.django_db(transaction=True)
def test_an_append_rolled_back_with_its_savepoint_is_not_built_on():
    with transaction.atomic():
        record("test", "kept")
        with pytest.raises(RuntimeError), transaction.atomic():
            record("test", "undone")
            raise RuntimeError("the change this append recorded failed")
        record("test", "after")
        with transaction.atomic():
            record("test", "inner, kept")
        record("test", "last")
    rows = list(AuditEvent.objects.order_by("seq").values_list("seq", "verb"))
    assert rows == [(1, "kept"), (2, "after"), (3, "inner, kept"), (4, "last")]
    assert verify_chain().ok


@pytest.mark.django_db(transaction=True)
def test_a_transaction_builds_on_what_another_committed_meanwhile():
    def elsewhere():
        try:
            record("other", "between")
        finally:
            connections.close_all()

    with transaction.atomic():
        record("test", "first")
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    with transaction.atomic():
        record("test", "second")
        record("test", "third")
    verbs = list(AuditEvent.objects.order_by("seq").values_list("verb", flat=True))
    assert verbs == ["first", "between", "second", "third"]
    assert verify_chain().ok


@pytest.mark.django_db(transaction=True)
def test_concurrent_transactions_append_one_unbroken_chain(monkeypatch):
    """Eight writers at once, each transaction slow between its read of the end and its
    commit: every append builds on the one committed before it (the lock is held
    before the end is read, and until the commit)."""
    import audit.services

    real_digest = audit.services._digest

    def slow_digest(*args):
        time.sleep(0.002)  # widen the gap between reading the end and writing after it
        return real_digest(*args)

    monkeypatch.setattr(audit.services, "_digest", slow_digest)
    start = threading.Barrier(8)
    failures = []

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(10):
                with transaction.atomic():
                    record(f"writer-{n}", "one", None, i=i)
                    record(f"writer-{n}", "two", None, i=i)
        except Exception as exc:  # reported below, not lost in the thread
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    rows = list(AuditEvent.objects.order_by("seq").values_list("seq", "actor", "verb"))
    assert [seq for seq, _, _ in rows] == list(range(1, 161))
    for first, second in zip(rows[::2], rows[1::2], strict=True):  # a transaction's two in a row
        assert (first[1], first[2], second[1], second[2]) == (first[1], "one", first[1], "two")
    assert verify_chain().ok


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("damage", "first_bad"),
    [
        (None, None),
        ("UPDATE audit_auditevent SET actor = 'user:mallory' WHERE seq = 9", 9),
        ("DELETE FROM audit_auditevent WHERE seq = 5", 5),  # the first row of a stretch
        ("DELETE FROM audit_auditevent WHERE seq = 8", 8),  # the last row of one
    ],
    ids=["intact", "edited", "seam-start-deleted", "seam-end-deleted"],
)
def test_a_long_chain_checked_by_several_processes_finds_the_same_row(
    monkeypatch, damage, first_bad
):
    import audit.services

    for n in range(12):
        with transaction.atomic():
            record("system", "test.event", None, n=n, text='ünïcode "quoted" \n')
    if damage:
        with connection.cursor() as cursor:
            cursor.execute(damage)
    alone = verify_chain()
    monkeypatch.setattr(audit.services, "PARALLEL_FROM", 1)
    together = verify_chain(workers=3)  # rows 1-4, 5-8 and 9-12, one process each
    assert (together.ok, together.first_bad_seq) == (alone.ok, alone.first_bad_seq)
    assert alone.first_bad_seq == first_bad
    if first_bad is None:
        assert together.checked == alone.checked == 12


@pytest.mark.django_db(transaction=True)
def test_a_record_made_on_a_whole_second_verifies(monkeypatch):
    import datetime

    import audit.services

    whole = datetime.datetime(2026, 11, 27, 4, 30, 37, tzinfo=datetime.UTC)
    monkeypatch.setattr(audit.services.timezone, "now", lambda: whole)
    with transaction.atomic():
        record("system", "test.event", None, n=1)
    monkeypatch.undo()
    with transaction.atomic():
        record("system", "test.event", None, n=2)
    assert verify_chain().ok and verify_chain().checked == 2
