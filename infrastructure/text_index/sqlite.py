"""The text index on SQLite: an FTS5 table in a file of its own, kept from noted rows.

FTS5 merges its segments inside the transaction that writes it: a delete of
200 rows took 8 ms at p50 and up to 830 ms, all under the database's writer
lock when the index lived in the database. So the index lives beside it
(``<database>-text``, with a writer lock of its own), and the database only
notes what changed:

- **Notes.** Triggers on the table append ``(seq, id)`` to ``<table>_text_pending``
  for every row written, edited (in an indexed column) or deleted: a b-tree
  append, a few µs of the writing transaction.
- **Catching up** (``catch_up``; the periodic task, and after a seed): read a batch
  of notes with their rows' text as committed, write them into the index
  under the index file's lock (a row's entry replaced, or removed when the row
  is gone) with the last note applied (``applied``). The notes a run applied
  are deleted from the database at the start of the run after next, a short
  write under its lock: a search that read the index just before a run
  still finds the notes after what it read.
- **A search** reads the ids matching in the index and ``applied`` in one read;
  a row with a note after ``applied`` is tested against its own text instead
  (``Notes``), so the answer is the table's as it is now, however far behind
  the index is.
- **The index belongs to one database.** The migration writes a random token into
  ``<table>_text_source`` and the index records the token it was built for.
  A missing file, another token (a restored or copied database), a table
  remade without its triggers (``ensure`` draws a new token) or notes the
  database no longer reached (``applied`` past its counter) make the index
  unready: searches read the table, and the next catch-up builds the index
  again, a batch at a time, from the rows by id (notes after the build's start
  are applied after it).

An in-memory database has no file beside it: its searches read the table.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass

from infrastructure.sqlite.checkpoints import open_writer_lock

BATCH = 2000  # notes, or rows while building, per index transaction
SUFFIX = "-text"
_META = (
    "CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, source TEXT NOT NULL, "
    "applied INTEGER NOT NULL, built_to INTEGER, forget_to INTEGER NOT NULL DEFAULT 0)"
)
_local = threading.local()


def index_path(database: str) -> str:
    """The index file of the database at ``database``."""
    return f"{database}{SUFFIX}"


def index_files(database: str) -> list[str]:
    """Every file the index of ``database`` leaves on disk (for a restore to remove)."""
    path = index_path(database)
    return [path, f"{path}-wal", f"{path}-shm", f"{path}.writer-lock"]


@dataclass(frozen=True)
class Names:
    """The names one index uses: in the database (``pending``, ``source``) and in its file (``fts``)."""

    table: str
    columns: tuple[str, ...]

    @property
    def fts(self) -> str:
        return f"{self.table}_text"

    @property
    def pending(self) -> str:
        return f"{self.fts}_pending"

    @property
    def source(self) -> str:
        return f"{self.fts}_source"

    @property
    def quoted(self) -> str:
        return ", ".join(f'"{column}"' for column in self.columns)


# The database's side: notes, the token, the triggers.


def create(cursor, names: Names) -> None:
    """The notes, a new token and the triggers (on a database that had the index inside it,
    the old table, notes and triggers go first)."""
    cursor.execute(f'DROP TABLE IF EXISTS "{names.fts}"')  # the index as it was, in the database
    cursor.execute(f'PRAGMA table_info("{names.pending}")')
    if {row[1] for row in cursor.fetchall()} == {"id"}:  # its notes then: no order kept
        cursor.execute(f'DROP TABLE "{names.pending}"')
    cursor.execute(
        f'CREATE TABLE IF NOT EXISTS "{names.pending}" '
        "(seq INTEGER PRIMARY KEY AUTOINCREMENT, id INTEGER NOT NULL)"
    )
    cursor.execute(f'CREATE TABLE IF NOT EXISTS "{names.source}" (token TEXT NOT NULL)')
    for name in triggers(names):
        cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    for sql in triggers(names).values():
        cursor.execute(sql)
    new_token(cursor, names)


def drop(cursor, names: Names, database: str | None) -> None:
    for name in triggers(names):
        cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    for table in (names.fts, names.pending, names.source):
        cursor.execute(f'DROP TABLE IF EXISTS "{table}"')
    if database:
        forget_connections()
        for path in index_files(database):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def ensure(cursor, names: Names) -> bool:
    """Put back triggers a table remake dropped, and draw a new token if any was missing
    (changes made meanwhile went unnoted: the index is built again). True if it did."""
    cursor.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = %s", [names.source]
    )
    if cursor.fetchone() is None:
        return False  # not migrated this far
    cursor.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [names.table]
    )
    present = {name for (name,) in cursor.fetchall()}
    missing = [sql for name, sql in triggers(names).items() if name not in present]
    for sql in missing:
        cursor.execute(sql)
    if missing:
        new_token(cursor, names)
    return bool(missing)


def new_token(cursor, names: Names) -> None:
    cursor.execute(f'DELETE FROM "{names.source}"')
    cursor.execute(f'INSERT INTO "{names.source}"(token) VALUES (%s)', [secrets.token_hex(16)])


def triggers(names: Names) -> dict[str, str]:
    """A row written, edited in an indexed column, or deleted is noted."""
    fts, table, pending = names.fts, names.table, names.pending
    changed = " OR ".join(f'old."{column}" IS NOT new."{column}"' for column in names.columns)
    return {
        f"{fts}_insert": (
            f'CREATE TRIGGER "{fts}_insert" AFTER INSERT ON "{table}" '
            f'BEGIN INSERT INTO "{pending}"(id) VALUES (new.id); END'
        ),
        f"{fts}_update": (
            f'CREATE TRIGGER "{fts}_update" AFTER UPDATE OF {names.quoted} ON "{table}" '
            f'WHEN {changed} BEGIN INSERT INTO "{pending}"(id) VALUES (new.id); END'
        ),
        f"{fts}_delete": (
            f'CREATE TRIGGER "{fts}_delete" AFTER DELETE ON "{table}" '
            f'BEGIN INSERT INTO "{pending}"(id) VALUES (old.id); END'
        ),
    }


def standing(cursor, names: Names) -> tuple[str | None, int]:
    """The database's token and its notes' counter (the last ``seq`` ever given)."""
    cursor.execute(
        f'SELECT (SELECT token FROM "{names.source}" LIMIT 1), '
        "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = ?), 0)",
        [names.pending],
    )
    return cursor.fetchone()


# A search.


@dataclass(frozen=True)
class Found:
    """What the index holds of a text: the matching ids (up to ``limit``), as of note ``applied``."""

    ids: list[int]
    applied: int


def find(db, names: Names, phrase: str, limit: int) -> Found | None:
    """The index's answer for ``phrase`` (an FTS5 phrase), or None where it is not ready."""
    database = db.settings_dict["NAME"]
    if db.is_in_memory_db() or not os.path.exists(index_path(database)):
        return None
    with db.cursor() as cursor:
        token, counter = standing(cursor, names)
    index = _connection(index_path(database))
    try:
        index.execute("BEGIN")
        meta = index.execute(
            "SELECT source, applied, built_to FROM state WHERE name = ?", (names.fts,)
        ).fetchone()
        if meta is None or meta[0] != token or meta[2] is not None or meta[1] > counter:
            return None
        rows = index.execute(
            f'SELECT rowid FROM "{names.fts}" WHERE "{names.fts}" MATCH ? LIMIT ?',
            (phrase, limit),
        ).fetchall()
    except sqlite3.OperationalError:  # no state table yet: a file being made
        return None
    finally:
        if index.in_transaction:
            index.execute("COMMIT")
    return Found([rowid for (rowid,) in rows], meta[1])


# Catching up.


def catch_up(database: str, names: Names, seconds: float | None = None, init: str = "") -> int:
    """Apply the notes (building the index first where it is not ready), for up to
    ``seconds`` (all of them if None); how many rows were indexed or removed. ``init``:
    the pragmas the database's own connections run (its checkpoints, above all)."""
    main = _connection(database, init)
    path = index_path(database)
    lock = _lock(path)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        index = _connection(path)
        index.execute("PRAGMA journal_mode=WAL")
        index.execute(_META)
        return _Catching(main, index, database, names, seconds).run()
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)


class _Catching:
    """One catch-up, under the index file's lock."""

    def __init__(self, main, index, database: str, names: Names, seconds: float | None):
        self.main, self.index, self.database, self.names = main, index, database, names
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def run(self) -> int:
        names = self.names
        try:
            token, counter = standing(self.main.cursor(), names)
        except sqlite3.OperationalError:  # the database is not migrated this far
            return 0
        if token is None:
            return 0
        meta = self.index.execute(
            "SELECT source, applied, built_to, forget_to FROM state WHERE name = ?", (names.fts,)
        ).fetchone()
        if meta is None or meta[0] != token or meta[1] > counter:
            meta = self._start_building(token, counter)
        _, applied, built_to, forget_to = meta
        done = 0
        # A search reads the index, then the notes after what it had applied: a note is
        # deleted by the second run after the one that applied it, so a search that read
        # the index before the run that applied it still finds it.
        self._forget(forget_to)
        if forget_to != applied:
            with self._writing():
                self.index.execute(
                    "UPDATE state SET forget_to = ? WHERE name = ?", (applied, names.fts)
                )
        while self.deadline is None or time.monotonic() < self.deadline:
            if built_to is not None:
                count, built_to = self._build_step(built_to)
            else:
                count, applied = self._apply_step(applied)
                if not count:
                    break
            done += count
        return done

    def _start_building(self, token: str, counter: int) -> tuple:
        """An empty index that holds every note up to ``counter``: the rows are copied
        as they are now, and notes after it are applied once they are."""
        names = self.names
        with self._writing():
            self.index.execute(f'DROP TABLE IF EXISTS "{names.fts}"')
            self.index.execute(
                f'CREATE VIRTUAL TABLE "{names.fts}" USING fts5({names.quoted}, '
                "tokenize='trigram', columnsize=0)"
            )
            self.index.execute(
                "INSERT OR REPLACE INTO state(name, source, applied, built_to) VALUES (?, ?, ?, 0)",
                (names.fts, token, counter),
            )
        return token, counter, 0, 0

    def _build_step(self, after: int) -> tuple[int, int | None]:
        names = self.names
        rows = self.main.execute(
            f'SELECT id, {names.quoted} FROM "{names.table}" WHERE id > ? ORDER BY id LIMIT ?',
            (after, BATCH),
        ).fetchall()
        built_to = rows[-1][0] if rows else None
        with self._writing():
            self._put(rows)
            self.index.execute(
                "UPDATE state SET built_to = ? WHERE name = ?", (built_to, names.fts)
            )
        return len(rows), built_to

    def _apply_step(self, applied: int) -> tuple[int, int]:
        names = self.names
        texts = ", ".join(f'row."{column}"' for column in names.columns)
        notes = self.main.execute(
            f"SELECT note.seq, note.id, row.id IS NOT NULL, {texts} "
            f'FROM "{names.pending}" AS note LEFT JOIN "{names.table}" AS row ON row.id = note.id '
            "WHERE note.seq > ? ORDER BY note.seq LIMIT ?",
            (applied, BATCH),
        ).fetchall()
        if not notes:
            return 0, applied
        rows = {note[1]: note[2:] for note in notes}  # (still there, its text) now, once a row
        last = notes[-1][0]
        with self._writing():
            self.index.executemany(
                f'DELETE FROM "{names.fts}" WHERE rowid = ?', [(rowid,) for rowid in rows]
            )
            self._put([(rowid, *row[1:]) for rowid, row in rows.items() if row[0]])
            self.index.execute("UPDATE state SET applied = ? WHERE name = ?", (last, names.fts))
        return len(rows), last

    def _put(self, rows: list[tuple]) -> None:
        marks = ", ".join("?" * (len(self.names.columns) + 1))
        self.index.executemany(
            f'INSERT OR REPLACE INTO "{self.names.fts}"(rowid, {self.names.quoted}) '
            f"VALUES ({marks})",
            rows,
        )

    def _forget(self, applied: int) -> None:
        """Delete the notes up to ``applied``, which the index holds: a short write, under
        the database's lock."""
        held = f'SELECT EXISTS (SELECT 1 FROM "{self.names.pending}" WHERE seq <= ?)'
        if not self.main.execute(held, (applied,)).fetchone()[0]:
            return
        lock = _lock(self.database)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            self.main.execute(f'DELETE FROM "{self.names.pending}" WHERE seq <= ?', (applied,))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _writing(self):
        self.index.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.index.execute("ROLLBACK")
            raise
        self.index.execute("COMMIT")


# Connections of their own, one per thread and file: a catch-up reads only what is
# committed, whatever transaction the caller is in.


def _connection(path: str, init: str = "") -> sqlite3.Connection:
    connections = _local.__dict__.setdefault("connections", {})
    if path not in connections:
        connection = sqlite3.connect(path, timeout=30, isolation_level=None)
        connection.execute("PRAGMA synchronous=NORMAL")
        if init:
            connection.executescript(init)
        connections[path] = connection
    return connections[path]


def _lock(path: str) -> int:
    locks = _local.__dict__.setdefault("locks", {})
    if path not in locks:
        locks[path] = open_writer_lock(path)
    return locks[path]


def forget_connections() -> None:
    """Close this thread's connections and locks (their files are about to go)."""
    for connection in _local.__dict__.pop("connections", {}).values():
        connection.close()
    for fd in _local.__dict__.pop("locks", {}).values():
        os.close(fd)
