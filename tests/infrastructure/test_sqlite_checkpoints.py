"""The write-ahead log is checkpointed beside the writers, and still starts over."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time

import pytest

from infrastructure.sqlite.checkpoints import (
    LOG_SIZE_LIMIT,
    RESTART_PAGES,
    Checkpointer,
    writer_lock_path,
)

PAGE = 4096


@pytest.fixture
def database(tmp_path) -> str:
    path = str(tmp_path / "db.sqlite3")
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB)")
    return path


class Writer:
    """A writer as the console's are: each commit under the writer lock, no checkpoints of its own."""

    def __init__(self, database: str):
        self.connection = sqlite3.connect(database, isolation_level=None)
        self.connection.execute("PRAGMA wal_autocheckpoint=0")
        self.lock = os.open(writer_lock_path(database), os.O_RDWR | os.O_CREAT)

    def commit(self, pages: int = 1) -> None:
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            self.connection.execute("BEGIN IMMEDIATE")
            for _ in range(pages):
                self.connection.execute("INSERT INTO rows (body) VALUES (?)", (os.urandom(PAGE),))
            self.connection.execute("COMMIT")
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)

    def log_pages(self) -> int:
        """Pages in the log now (a checkpoint that copies nothing new says so)."""
        return self.connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]

    def close(self) -> None:
        self.connection.close()
        os.close(self.lock)


@pytest.fixture
def writer(database):
    writer = Writer(database)
    yield writer
    writer.close()


def one_round(database: str) -> tuple[int, int, bool]:
    connection = sqlite3.connect(database, isolation_level=None, timeout=0)
    lock = os.open(writer_lock_path(database), os.O_RDWR)
    try:
        return Checkpointer.checkpoint(connection, lock)
    finally:
        connection.close()
        os.close(lock)


def round_while_a_writer_writes(database: str, writer: Writer) -> tuple[int, int, bool]:
    """One round while ``writer`` holds the writer lock; it must end without queuing for it."""
    fcntl.flock(writer.lock, fcntl.LOCK_EX)  # a writer is in the middle of a transaction
    try:
        result = []
        round_ = threading.Thread(target=lambda: result.append(one_round(database)))
        round_.start()
        round_.join(5)
        assert not round_.is_alive()  # it never queued for the writer lock
    finally:
        fcntl.flock(writer.lock, fcntl.LOCK_UN)
    [outcome] = result
    return outcome


def test_a_short_log_is_copied_without_waiting_for_the_writer_lock(database, writer):
    writer.commit(pages=50)
    pages, copied, ready = round_while_a_writer_writes(database, writer)
    assert 50 < pages < RESTART_PAGES and copied == pages


def test_a_long_log_is_finished_under_the_writer_lock_and_then_starts_over(database, writer):
    for _ in range(RESTART_PAGES // 100 + 1):
        writer.commit(pages=100)
    fcntl.flock(writer.lock, fcntl.LOCK_EX)
    result = []
    round_ = threading.Thread(target=lambda: result.append(one_round(database)))
    try:
        round_.start()
        round_.join(0.5)
        assert round_.is_alive()  # the first pass is done; the second waits for the writer
    finally:
        fcntl.flock(writer.lock, fcntl.LOCK_UN)
    round_.join(5)
    [(pages, copied, ready)] = result
    assert pages >= RESTART_PAGES and copied == pages
    writer.commit()
    assert writer.log_pages() < 10  # the next commit started the log over
    count = sqlite3.connect(database).execute("SELECT count(*) FROM rows").fetchone()[0]
    assert count == (RESTART_PAGES // 100 + 1) * 100 + 1


def test_a_reader_in_the_way_costs_the_writers_nothing_and_the_next_round_restarts(
    database, writer
):
    """A long log a reader still reads cannot start over: the round does not take the
    writer lock to find that out, and once the reader is done a round makes it restart."""
    for _ in range(RESTART_PAGES // 100 + 1):
        writer.commit(pages=100)
    reader = sqlite3.connect(database, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM rows").fetchone()  # reads as of now, from the log
    writer.commit(pages=10)  # past what the reader sees: the copy stops short of it
    pages, copied, ready = round_while_a_writer_writes(database, writer)
    assert pages >= RESTART_PAGES and copied < pages and not ready
    reader.execute("COMMIT")
    reader.close()
    pages, copied, ready = one_round(database)
    assert ready and copied == pages
    writer.commit()
    assert writer.log_pages() < 10  # the next commit started the log over


def test_a_round_leaves_few_pages_to_copy_under_the_writer_lock(database, writer):
    """Pages committed while the round copies are copied before it takes the lock."""
    for _ in range(RESTART_PAGES // 100 + 1):
        writer.commit(pages=100)
    connection = sqlite3.connect(database, isolation_level=None, timeout=0)
    lock = os.open(writer_lock_path(database), os.O_RDWR)
    probe = os.open(writer_lock_path(database), os.O_RDWR)
    copies = []
    reader = sqlite3.connect(database, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM rows").fetchone()  # reads as of the end of the log

    def locked() -> bool:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False

    class Rows:
        def __init__(self, row):
            self.fetchone = lambda: row

    class Watched:  # the round's connection; 600 more pages are committed after its first copy
        def execute(self, sql):
            copies.append((sql, locked()))
            [row] = connection.execute(sql).fetchall()
            if len(copies) == 1:
                for _ in range(6):
                    writer.commit(pages=100)  # appended: the reader keeps the log from restarting
                reader.execute("COMMIT")
            return Rows(row)

    try:
        pages, copied, ready = Checkpointer.checkpoint(Watched(), lock)
    finally:
        connection.close()
        reader.close()
        os.close(lock)
        os.close(probe)
    assert ready and copied == pages
    # the 600 pages were copied by a second copy without the lock; under it, nothing was left
    assert copies == [
        ("PRAGMA wal_checkpoint(PASSIVE)", False),
        ("PRAGMA wal_checkpoint(PASSIVE)", False),
        ("PRAGMA wal_checkpoint(PASSIVE)", False),
        ("PRAGMA wal_checkpoint(RESTART)", True),
    ]


def test_under_a_steady_stream_of_commits_the_log_stays_short(database, writer):
    checkpointer = Checkpointer(database, interval=0.005).start()
    try:
        for _ in range(400):
            writer.commit(pages=20)  # 8,000 pages in all
            time.sleep(0.001)  # what a request does between its transactions
    finally:
        checkpointer.stop()
    wal = os.path.getsize(f"{database}-wal") // PAGE
    assert wal < 4 * RESTART_PAGES, wal  # without the second pass it holds every page


def test_a_log_started_over_is_cut_back_to_its_size_limit(database, django_db_blocker):
    """A burst leaves the log file long; the writer that starts it over cuts it back."""
    from django.db.utils import ConnectionHandler

    settings = {"ENGINE": "infrastructure.sqlite", "NAME": database}
    console = ConnectionHandler({"default": settings})["default"]
    with django_db_blocker.unblock():  # a database of its own, not the test database
        with console.cursor() as cursor:
            cursor.execute("PRAGMA journal_size_limit")
            (limit,) = cursor.fetchone()
        console.close()
    assert limit == LOG_SIZE_LIMIT  # what every console connection is opened with
    writer = Writer(database)
    try:
        writer.connection.execute(f"PRAGMA journal_size_limit={limit}")
        for _ in range(2 * LOG_SIZE_LIMIT // PAGE // 100 + 1):  # a burst, no checkpoint meanwhile
            writer.commit(pages=100)
        assert os.path.getsize(f"{database}-wal") > 2 * LOG_SIZE_LIMIT
        one_round(database)
        writer.commit()  # starts the log over
        assert os.path.getsize(f"{database}-wal") <= LOG_SIZE_LIMIT
    finally:
        writer.close()
