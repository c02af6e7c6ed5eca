"""Lines the database writes (``infrastructure.archive.rows``): the same JSON on SQLite and
PostgreSQL, however many members a line has."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from infrastructure.archive import (
    as_text,
    fetch,
    flag,
    iso_time,
    json_array,
    json_object,
    json_rows,
)

pytestmark = pytest.mark.django_db


def test_an_object_of_more_members_than_one_call_takes_keeps_each_null_too():
    """SQLite's functions take 127 arguments and PostgreSQL's 100: a longer object is built in
    parts, and a null member stays (a merge patch would drop it)."""
    pairs = [(f"k{n}", "NULL" if n % 7 == 0 else str(n)) for n in range(130)]
    [(text,)] = fetch(f"SELECT {as_text(json_object(pairs))}")
    assert json.loads(text) == {f"k{n}": None if n % 7 == 0 else n for n in range(130)}


def test_times_flags_text_and_ordered_rows_read_as_python_writes_them():
    rows = "FROM (SELECT 2 AS n UNION ALL SELECT 1 UNION ALL SELECT 3) AS numbers"
    members = [
        ("empty", json_rows("n", f"{rows} WHERE n > 5", order="n")),
        ("ordered", json_rows(json_array(["n", "'x'"]), rows, order="n")),
        ("text", "%s"),
        ("yes", flag("(1 = 1)")),
        ("no", flag("(1 = 0)")),
        ("unknown", flag("NULL")),
    ]
    tricky = 'ü "q"\t\\\n\u2028'
    [(text,)] = fetch(f"SELECT {as_text(json_object(members))}", [tricky])
    assert json.loads(text) == {
        "empty": [], "ordered": [[1, "x"], [2, "x"], [3, "x"]], "text": tricky,
        "yes": True, "no": False, "unknown": None,
    }  # fmt: skip


def test_a_time_reads_as_isoformat_in_utc():
    from audit.models import AuditEvent  # a table with a time column, written by Django

    for at in (
        datetime(2026, 11, 20, 12, 0, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC),
    ):
        event = AuditEvent.objects.create(seq=at.microsecond + 1, created_at=at, actor="a",
                                          verb="v", object_type="", object_id="", data={},
                                          prev_hash="", hash="")  # fmt: skip
        [(text,)] = fetch(
            f"SELECT {iso_time('created_at')} FROM {AuditEvent._meta.db_table} WHERE seq = %s",
            [event.seq],
        )
        assert text == at.isoformat()
