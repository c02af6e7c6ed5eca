"""One order for the database's append-only tables: the audit chain and the channel layer's.

Readers of both follow row ids: the audit chain links each row to the one
before, and the embedded channel layer's pollers read ``id > last seen``. On
PostgreSQL an id is drawn when the row is inserted, not when it commits, so
a transaction holding id 10 can commit after another committed id 11; a
poller that read 11 in between would never see 10. Appending under one
transaction-scoped advisory lock makes ids follow commit order: the next
append draws its id only after the previous one's transaction ended. One lock
for both tables, so that a transaction appending to both cannot deadlock
with one taking them in the other order. SQLite serialises every writer
already (``infrastructure/sqlite``).
"""

from __future__ import annotations

from django.db import connection

_PG_LOCK_KEY = 0x41_49_52_4C  # "AIRL": any constant, the same everywhere
_PG_LOCK = f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY:d})"


def take_append_lock() -> None:
    """Hold the append lock until the current transaction ends (PostgreSQL only)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_PG_LOCK)


def read_under_append_lock(sql: str) -> list[tuple]:
    """Take the append lock, then run the read ``sql`` (no parameters): its rows.

    On PostgreSQL both go in one round trip, as one simple query of two
    statements: under READ COMMITTED each statement takes its own snapshot,
    so the read's is taken once the lock is held and it sees every append
    committed before. (``SELECT ... FROM (SELECT pg_advisory_xact_lock())``
    in one statement would not: its snapshot would predate the lock.)
    """
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            cursor.execute(sql)
            return cursor.fetchall()
        cursor.execute(f"{_PG_LOCK}; {sql}")
        cursor.nextset()
        return cursor.fetchall()
