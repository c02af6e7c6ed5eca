"""A substring index over a table's text columns, for ``?q=`` on lists of a million rows.

``icontains`` reads every row: 0.4 s a page at a million proposals. Here the
same question is answered from an index of trigrams, on either database:

- **SQLite**: an FTS5 table with the ``trigram`` tokenizer in a file of its
  own beside the database, kept from rows the database notes as they are
  written, edited or deleted (``sqlite``: why a file of its own, how it
  catches up, how a search stays exact while it is behind). A periodic task
  catches up; searches only read.
- **PostgreSQL**: ``pg_trgm`` GIN indexes on ``UPPER(column)``, the
  expression Django's ``icontains`` compares, so the same ``LIKE`` is served
  by them. Where the extension cannot be created (a role without the right),
  the migration says so and searches read the table as before.

A search shorter than three characters has no trigram to look up and reads
the table (as ``icontains``); so does, on SQLite, a text so common that
reading the table in the page's order finds a page sooner (``FREQUENT``).
Either way the answer is the same: rows whose column holds the text.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from django.db import DatabaseError, connection, connections, transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL

from . import sqlite

logger = logging.getLogger(__name__)

SHORTEST = 3  # a trigram
# SQLite reads matching rows from the index, then sorts them: 0.7 µs a row, so a
# text in every row of a million costs 0.7 s a page. Reading the table in the
# page's order and testing each row fills a page of a text in one row of N after
# about 100 × N rows, at 0.4 µs a row. The index is asked first how many rows
# hold the text (up to this many, 2 ms): fewer, the index; more, the table.
FREQUENT = 5000


@dataclass(frozen=True)
class TextIndex:
    """The index over ``columns`` of ``table``; ``create``/``drop`` take a schema editor."""

    table: str
    columns: tuple[str, ...]

    @property
    def names(self) -> sqlite.Names:
        return sqlite.Names(self.table, self.columns)

    def matching(self, text: str, via: str = "") -> Q:
        """Rows whose indexed row (the rows' own, or the one at the relation ``via``)
        holds ``text`` in any of the columns, case ignored."""
        prefix = f"{via}__" if via else ""
        scan = Q()
        for column in self.columns:
            scan |= Q(**{f"{prefix}{column}__icontains": text})
        if connection.vendor != "sqlite" or len(text) < SHORTEST:
            return scan
        phrase = '"' + text.replace('"', '""') + '"'
        found = sqlite.find(connection, self.names, phrase, FREQUENT)
        if found is None or len(found.ids) >= FREQUENT:
            return scan
        # Rows noted since the index's last catch-up are tested as they are now.
        key = f"{via or 'id'}__in"
        noted = Q(
            **{
                key: RawSQL(
                    f'SELECT id FROM "{self.names.pending}" WHERE seq > %s', [found.applied]
                )
            }
        )
        indexed = Q(**{key: RawSQL("SELECT value FROM json_each(%s)", [json.dumps(found.ids)])})
        return (indexed & ~noted) | (noted & scan)

    def catch_up(self, seconds: float | None = None, using: str = "default") -> int:
        """Bring the index up to the rows as committed, for up to ``seconds`` (SQLite);
        how many rows it indexed or removed. Nothing inside a transaction: it holds the
        database's writer lock, which the catch-up takes to delete the notes it applied."""
        db = connections[using]
        if db.vendor != "sqlite" or db.is_in_memory_db() or db.in_atomic_block:
            return 0
        init = db.settings_dict.get("OPTIONS", {}).get("init_command", "")
        return sqlite.catch_up(db.settings_dict["NAME"], self.names, seconds, init)

    # Schema.

    def create(self, schema_editor) -> None:
        vendor = schema_editor.connection.vendor
        if vendor == "sqlite":
            with schema_editor.connection.cursor() as cursor:
                sqlite.create(cursor, self.names)
        elif vendor == "postgresql":
            try:
                with transaction.atomic(using=schema_editor.connection.alias):
                    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            except DatabaseError as error:
                logger.warning(
                    "no trigram index for %s: the extension pg_trgm could not be created "
                    "(%s); text searches will read the table",
                    self.table,
                    str(error).strip(),
                )
                return
            for column in self.columns:
                schema_editor.execute(
                    f'CREATE INDEX IF NOT EXISTS "{self.table}_{column}_trgm" ON "{self.table}" '
                    f'USING gin (UPPER("{column}"::text) gin_trgm_ops)'
                )

    def drop(self, schema_editor) -> None:
        db = schema_editor.connection
        if db.vendor == "sqlite":
            with db.cursor() as cursor:
                sqlite.drop(
                    cursor, self.names, None if db.is_in_memory_db() else db.settings_dict["NAME"]
                )
        elif db.vendor == "postgresql":
            for column in self.columns:
                schema_editor.execute(f'DROP INDEX IF EXISTS "{self.table}_{column}_trgm"')

    def ensure(self, db) -> bool:
        """Put back any trigger a table remake dropped (SQLite); the index is then built
        again. True if something was put back."""
        if db.vendor != "sqlite":
            return False
        with db.cursor() as cursor:
            return sqlite.ensure(cursor, self.names)
