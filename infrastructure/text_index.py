"""A substring index over a table's text columns, for ``?q=`` on lists of a million rows.

``icontains`` reads every row: 0.4 s a page at a million proposals. Here the
same question is answered from an index of trigrams, on either database:

- **SQLite**: an FTS5 table with the ``trigram`` tokenizer (``<table>_text``)
  that holds no copy of the text (``content=`` the table itself). A row is
  not indexed as it is written: indexing it in a trigger cost the proposal's
  creation 0.6 ms at p50 and 3 ms at p95 (the index's merges). The trigger
  only notes its id (``<table>_text_pending``, a few µs); a periodic task
  and, for what came since, a search first index the noted rows, in one
  transaction (a hundred: 1 ms). Two more
  triggers keep indexed rows in step when their text changes or they are
  deleted. Django remakes a SQLite table to alter it, which drops its
  triggers: ``ensure`` runs after every ``migrate``, puts them back and
  rebuilds the index if it had to.
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

import logging
from dataclasses import dataclass

from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL

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
    def fts(self) -> str:
        return f"{self.table}_text"

    def matching(self, text: str, via: str = "") -> Q:
        """Rows whose indexed row (the rows' own, or the one at the relation ``via``)
        holds ``text`` in any of the columns, case ignored."""
        prefix = f"{via}__" if via else ""
        if connection.vendor == "sqlite" and len(text) >= SHORTEST:
            self.catch_up()
            phrase = '"' + text.replace('"', '""') + '"'
            select = f'SELECT rowid FROM "{self.fts}" WHERE "{self.fts}" MATCH %s'
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT count(*) FROM ({select} LIMIT {FREQUENT})", [phrase])
                (count,) = cursor.fetchone()
            if count < FREQUENT:
                return Q(**{f"{via or 'id'}__in": RawSQL(select, [phrase])})
        matches = Q()
        for column in self.columns:
            matches |= Q(**{f"{prefix}{column}__icontains": text})
        return matches

    def catch_up(self) -> int:
        """Index the rows written since the last search (SQLite); how many there were."""
        if connection.vendor != "sqlite":
            return 0
        with connection.cursor() as cursor:
            cursor.execute(f'SELECT EXISTS (SELECT 1 FROM "{self.pending}")')
            if not cursor.fetchone()[0]:
                return 0
        names = self._names()
        with transaction.atomic(), connection.cursor() as cursor:  # one writer at a time
            cursor.execute(  # pending first: the table is the large one
                f'INSERT INTO "{self.fts}"(rowid, {names}) SELECT row.id, '
                + ", ".join(f'row."{column}"' for column in self.columns)
                + f' FROM "{self.pending}" AS noted CROSS JOIN "{self.table}" AS row '
                f"ON row.id = noted.id"
            )
            added = cursor.rowcount
            cursor.execute(f'DELETE FROM "{self.pending}"')
        return added

    @property
    def pending(self) -> str:
        return f"{self.fts}_pending"

    def _names(self) -> str:
        return ", ".join(f'"{column}"' for column in self.columns)

    # Schema.

    def create(self, schema_editor) -> None:
        vendor = schema_editor.connection.vendor
        if vendor == "sqlite":
            schema_editor.execute(
                f'CREATE VIRTUAL TABLE IF NOT EXISTS "{self.fts}" USING fts5({self._names()}, '
                f"content='{self.table}', content_rowid='id', tokenize='trigram', columnsize=0)"
            )
            schema_editor.execute(
                f'CREATE TABLE IF NOT EXISTS "{self.pending}" (id integer PRIMARY KEY)'
            )
            self.ensure(schema_editor.connection, rebuild=True)
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
        vendor = schema_editor.connection.vendor
        if vendor == "sqlite":
            for trigger in self._triggers():
                schema_editor.execute(f'DROP TRIGGER IF EXISTS "{trigger}"')
            schema_editor.execute(f'DROP TABLE IF EXISTS "{self.fts}"')
            schema_editor.execute(f'DROP TABLE IF EXISTS "{self.pending}"')
        elif vendor == "postgresql":
            for column in self.columns:
                schema_editor.execute(f'DROP INDEX IF EXISTS "{self.table}_{column}_trgm"')

    def ensure(self, db, rebuild: bool = False) -> bool:
        """Put back any trigger a table remake dropped (SQLite); rebuild the index if any
        was missing. True if something was put back."""
        if db.vendor != "sqlite":
            return False
        with db.cursor() as cursor:
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = %s", [self.fts]
            )
            if cursor.fetchone() is None:
                return False  # not migrated this far
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
                [self.table],
            )
            present = {name for (name,) in cursor.fetchall()}
            missing = [name for name in self._triggers() if name not in present]
            for name in missing:
                cursor.execute(self._triggers()[name])
            if missing or rebuild:
                cursor.execute(f'INSERT INTO "{self.fts}"("{self.fts}") VALUES (\'rebuild\')')
                cursor.execute(f'DELETE FROM "{self.pending}"')
        return bool(missing)

    def _triggers(self) -> dict[str, str]:
        """A new row is noted; a noted row is indexed by the next search as it is then;
        an indexed row follows its text and leaves with its row."""
        fts, table, pending, names = self.fts, self.table, self.pending, self._names()
        new = ", ".join(f'new."{column}"' for column in self.columns)
        old = ", ".join(f'old."{column}"' for column in self.columns)
        indexed = f'NOT EXISTS (SELECT 1 FROM "{pending}" WHERE id = old.id)'
        changed = " OR ".join(f'old."{column}" IS NOT new."{column}"' for column in self.columns)
        remove = f'INSERT INTO "{fts}"("{fts}", rowid, {names}) VALUES (\'delete\', old.id, {old});'
        return {
            f"{fts}_insert": (
                f'CREATE TRIGGER "{fts}_insert" AFTER INSERT ON "{table}" '
                f'BEGIN INSERT INTO "{pending}"(id) VALUES (new.id); END'
            ),
            f"{fts}_delete": (
                f'CREATE TRIGGER "{fts}_delete" AFTER DELETE ON "{table}" BEGIN '
                f'INSERT INTO "{fts}"("{fts}", rowid, {names}) '
                f"SELECT 'delete', old.id, {old} WHERE {indexed}; "
                f'DELETE FROM "{pending}" WHERE id = old.id; END'
            ),
            f"{fts}_update": (
                f'CREATE TRIGGER "{fts}_update" AFTER UPDATE OF {names} ON "{table}" '
                f"WHEN {indexed} AND ({changed}) BEGIN {remove} "
                f'INSERT INTO "{fts}"(rowid, {names}) VALUES (new.id, {new}); END'
            ),
        }
