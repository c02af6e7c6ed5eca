"""The trigram index behind ``?q=``: same answers as a scan, read from the index, kept in step."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader

from approvals.models import Proposal
from infrastructure import text_index
from infrastructure.text_index import sqlite as index_sqlite

URL = "/api/v1/proposals"


def make(agent, summary="", reason="", status="pending"):
    return Proposal.objects.create(
        agent=agent, action="script.execute", status=status, summary=summary, reason=reason
    )


def found(api, text: str, url: str = URL) -> set[int]:
    response = api.get(url, {"q": text})
    assert response.status_code == 200, response.content
    return {item.get("proposal_id", item["id"]) for item in response.json()["items"]}


def scanned(text: str) -> set[int]:
    """The answer the index must give: what a scan of both columns finds."""
    lowered = text.lower()
    return {
        proposal.pk
        for proposal in Proposal.objects.all()
        if lowered in proposal.summary.lower() or lowered in proposal.reason.lower()
    }


SEARCHES = [
    "nginx", "NGINX", "Restart ngi", "e c", "ab", "a", "quoted\" th", '"', "50%", "%",
    "_x", "under_score", "x" * 200, "stale cache", "cache is stale", "ÿþ",
]  # fmt: skip


def caught_up(caught: bool) -> None:
    """The index up to date with what is committed, or left behind it."""
    if caught:
        Proposal.text_index.catch_up()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("caught", [True, False], ids=["from-the-index", "from-the-notes"])
@pytest.mark.parametrize("frequent", [5000, 2], ids=["index", "common-texts-scanned"])
def test_a_search_finds_what_a_scan_finds_whatever_it_holds(
    agent, reviewer_api, monkeypatch, frequent, caught
):
    monkeypatch.setattr(text_index, "FREQUENT", frequent)
    make(agent, "Restart Nginx", "the cache is stale")
    make(agent, "drop table", 'cleanup of a "quoted" thing')
    make(agent, "ab", "under_score and 50% off")
    make(agent, "", "x" * 250)
    make(agent, "grow_x", "ÿþ")
    caught_up(caught)
    for text in SEARCHES:
        assert found(reviewer_api, text) == scanned(text), text
    assert_index_matches_the_table()
    assert scanned("nginx") and scanned('"') and scanned("%")  # the cases are not all empty


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("caught", [True, False], ids=["caught-up-between", "behind"])
def test_an_edited_or_deleted_proposal_is_found_as_it_is_now(agent, reviewer_api, caught):
    first = make(agent, "restart nginx", "stuck")
    second = make(agent, "print hello", "greet")
    caught_up(caught)
    assert found(reviewer_api, "nginx") == {first.pk}
    second.reason = "now about nginx too"
    second.save()
    assert found(reviewer_api, "nginx") == {first.pk, second.pk}
    assert found(reviewer_api, "greet") == set()
    caught_up(caught)
    assert found(reviewer_api, "greet") == set()
    first.status = "approved"  # a change the index does not hold
    first.save(update_fields=["status"])
    first.delete()
    assert found(reviewer_api, "nginx") == {second.pk}
    caught_up(caught)
    assert found(reviewer_api, "nginx") == {second.pk}
    assert_index_matches_the_table()


def test_rows_of_a_transaction_not_yet_committed_are_found_by_their_own_text(agent, reviewer_api):
    """Inside a transaction (this test's): the catch-up does nothing, and would read only
    what is committed, so these rows stay noted, and the search tests them as they are."""
    edited = make(agent, "restart nginx", "stuck")
    gone = make(agent, "nginx gone", "")
    assert Proposal.text_index.catch_up() == 0  # it would wait on this transaction's lock
    if connection.vendor == "sqlite":
        assert noted() >= 2
    edited.summary = "restart apache"
    edited.save()
    gone.delete()
    assert found(reviewer_api, "nginx") == set()
    assert found(reviewer_api, "apache") == {edited.pk}


@pytest.mark.django_db(transaction=True)
def test_a_periodic_task_indexes_what_was_written_off_the_searches_path(agent, reviewer_api):
    from approvals.retention import passes
    from approvals.retention.tasks import index_text
    from console.celery import app

    app.finalize()
    assert app.conf.beat_schedule["index-text"]["task"] == index_text.name
    Proposal.text_index.catch_up()  # what earlier tests left
    written = make(agent, "restart nginx")
    make(agent, "print hello")
    cache.add(passes.LOCK, "a pass", 60)  # a retention pass has the CPU: the task waits
    try:
        assert index_text() == 0
    finally:
        cache.delete(passes.LOCK)
    assert index_text() == (2 if connection.vendor == "sqlite" else 0)
    assert index_text() == 0
    assert found(reviewer_api, "nginx") == {written.pk}
    if connection.vendor == "sqlite":
        assert (
            noted() == 2
        )  # kept until the second run after, for searches that read the index before
        index_text()
        assert noted() == 0  # then gone from the database
    assert_index_matches_the_table()


def noted() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{Proposal.text_index.names.pending}"')
        return cursor.fetchone()[0]


def index_file() -> sqlite3.Connection:
    return sqlite3.connect(index_sqlite.index_path(connection.settings_dict["NAME"]))


def assert_index_matches_the_table() -> None:
    """Caught up, the index file holds each row's text and nothing else, and passes
    SQLite's own check of an FTS5 index (rank 1)."""
    if connection.vendor != "sqlite":
        return
    Proposal.text_index.catch_up()
    with contextlib.closing(index_file()) as index:
        # raises "database disk image is malformed"
        index.execute(
            "INSERT INTO approvals_proposal_text(approvals_proposal_text, rank) "
            "VALUES ('integrity-check', 1)"
        )
        held = set(index.execute("SELECT rowid, summary, reason FROM approvals_proposal_text"))
    assert held == set(Proposal.objects.values_list("id", "summary", "reason"))


def test_the_executions_list_searches_its_proposals_text(agent, reviewer_api):
    from tests.executions.test_execution_list import ran

    restart = ran(agent, summary="restart nginx")
    ran(agent, summary="print hello", reason="not the web server")
    for text in ("NGINX", "ng"):  # from the index, and by a scan
        response = reviewer_api.get("/api/v1/executions", {"q": text})
        assert response.status_code == 200, response.content
        assert [item["id"] for item in response.json()["items"]] == [restart.pk], text


def sql(text: str) -> str:
    return str(Proposal.objects.filter(Proposal.text_index.matching(text)).query)


def plan(text: str) -> str:
    query = Proposal.objects.filter(Proposal.text_index.matching(text))
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL enable_seqscan = off")  # a few rows: make it show it can
        return query.explain()


@pytest.mark.django_db(transaction=True)
def test_a_search_of_three_characters_or_more_reads_the_index(agent, monkeypatch):
    make(agent, "restart nginx", "stuck")
    make(agent, "restart nginx", "again")
    if connection.vendor == "sqlite":
        Proposal.text_index.catch_up()
        assert "json_each" in sql("nginx"), sql("nginx")
        assert "json_each" not in sql("ng"), sql("ng")  # no trigram in it: a scan
        monkeypatch.setattr(text_index, "FREQUENT", 2)
        assert "json_each" not in sql("nginx"), sql("nginx")  # in every row: a scan
        assert "json_each" in sql("stuck"), sql("stuck")
    else:
        for column in ("summary", "reason"):
            assert f"approvals_proposal_{column}_trgm" in plan("nginx"), plan("nginx")


@pytest.mark.django_db(transaction=True)
def test_a_remade_table_gets_its_triggers_back_at_the_next_migrate(agent, reviewer_api):
    """Django alters a SQLite table by building a new one, which drops the triggers."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite remakes a table to alter it; PostgreSQL alters it in place")
    before = make(agent, "restart nginx")
    with connection.schema_editor() as editor:
        editor._remake_table(Proposal)
    triggers = "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s"
    with connection.cursor() as cursor:
        cursor.execute(triggers, ["approvals_proposal"])
        assert cursor.fetchone() == (0,)  # what the migrate afterwards has to mend
    changed = make(agent, "nginx, noted by nobody")  # the remade table's triggers are gone
    Proposal.objects.filter(pk=before.pk).update(summary="restart apache")
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(triggers, ["approvals_proposal"])
        assert cursor.fetchone() == (3,)
    # The index missed those changes: it is not used until it is built again.
    assert "json_each" not in sql("nginx")
    after = make(agent, "nginx again")
    assert found(reviewer_api, "nginx") == {changed.pk, after.pk}
    Proposal.text_index.catch_up()
    assert "json_each" in sql("nginx")
    assert found(reviewer_api, "nginx") == {changed.pk, after.pk}
    assert found(reviewer_api, "apache") == {before.pk}
    assert_index_matches_the_table()


@pytest.mark.django_db(transaction=True)
def test_the_index_goes_with_its_migration_and_comes_back_with_the_rows_in_it(agent, reviewer_api):
    kept = make(agent, "restart nginx")
    call_command("migrate", "approvals", "0006", verbosity=0)
    try:
        assert not index_present()
        assert not os.path.exists(index_sqlite.index_path(connection.settings_dict["NAME"]))
        # The rows as the schema of then holds them (later migrations added columns).
        loader = MigrationLoader(connection)
        name = loader.get_migration_by_prefix("approvals", "0006").name
        then = loader.project_state(("approvals", name)).apps
        added = then.get_model("approvals", "Proposal").objects.create(
            agent_id=agent.pk,
            action="script.execute",
            status="pending",
            summary="nginx while it was gone",
        )
    finally:
        call_command("migrate", verbosity=0)
    assert index_present()
    assert found(reviewer_api, "nginx") == {kept.pk, added.pk}
    Proposal.text_index.catch_up()
    assert found(reviewer_api, "nginx") == {kept.pk, added.pk}
    assert_index_matches_the_table()


def index_present() -> bool:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            tables = connection.introspection.table_names(cursor)
            return "approvals_proposal_text_pending" in tables
        return "approvals_proposal_summary_trgm" in connection.introspection.get_constraints(
            cursor, "approvals_proposal"
        )


@pytest.fixture
def sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("the index file is SQLite's; PostgreSQL's trigram indexes are the table's own")


@pytest.mark.usefixtures("sqlite_only")
@pytest.mark.django_db(transaction=True)
def test_the_index_is_written_while_the_database_takes_other_writers(agent, monkeypatch):
    """Its merges must not hold the database's writer lock: while the catch-up writes
    the index, the lock is free and another connection can write."""
    from infrastructure.sqlite.checkpoints import open_writer_lock

    database = connection.settings_dict["NAME"]
    for n in range(50):
        make(agent, f"restart nginx {n}")
    put = index_sqlite._Catching._put
    seen = []

    def put_while_another_writes(self, rows):
        put(self, rows)
        lock = open_writer_lock(database)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if anyone holds it
            with contextlib.closing(sqlite3.connect(database, timeout=0)) as other:
                other.execute(
                    "UPDATE approvals_proposal SET reason = 'elsewhere' WHERE id = ?", (rows[0][0],)
                )
                other.commit()
            seen.append(len(rows))
        finally:
            os.close(lock)

    monkeypatch.setattr(index_sqlite._Catching, "_put", put_while_another_writes)
    Proposal.text_index.catch_up()
    assert seen and sum(seen) >= 50
    monkeypatch.undo()
    assert_index_matches_the_table()  # the edits made meanwhile were noted and applied


@pytest.mark.usefixtures("sqlite_only")
@pytest.mark.django_db(transaction=True)
def test_a_search_that_read_the_index_before_catch_ups_still_finds_the_rows_as_they_are(
    agent, reviewer_api, monkeypatch
):
    """Between a search's read of the index and its query of the table, the periodic task
    may apply notes (twice, if the search is slow): the notes after what the search read
    must still be there."""
    Proposal.text_index.catch_up()
    Proposal.text_index.catch_up()
    kept = make(agent, "restart nginx")
    edited = make(agent, "restart apache")
    gone = make(agent, "nginx gone")
    Proposal.text_index.catch_up()
    assert found(reviewer_api, "nginx") == {kept.pk, gone.pk}
    find = index_sqlite.find

    def find_then_two_runs(*args):
        answer = find(*args)

        def meanwhile():
            Proposal.objects.filter(pk=edited.pk).update(summary="restart nginx too")
            Proposal.objects.filter(pk=gone.pk).delete()
            make(agent, "nginx new")
            Proposal.text_index.catch_up()
            Proposal.text_index.catch_up()
            connection.close()  # this thread's

        elsewhere = threading.Thread(target=meanwhile)  # its own connection: committed
        elsewhere.start()
        elsewhere.join()
        return answer

    monkeypatch.setattr(index_sqlite, "find", find_then_two_runs)
    answer = found(reviewer_api, "nginx")
    new = set(Proposal.objects.filter(summary="nginx new").values_list("pk", flat=True))
    assert len(new) == 1 and answer == {kept.pk, edited.pk, *new}
    monkeypatch.undo()
    assert found(reviewer_api, "nginx") == scanned("nginx")
    assert_index_matches_the_table()


@pytest.mark.usefixtures("sqlite_only")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["another-database", "notes-it-never-had", "no-file"])
def test_an_index_that_is_not_this_databases_is_not_read_and_is_built_again(
    agent, reviewer_api, how
):
    """A copy or a restore of the database beside an index made for another one."""
    kept = make(agent, "restart nginx")
    Proposal.text_index.catch_up()
    assert "json_each" in sql("nginx")
    with contextlib.closing(index_file()) as index, index:
        if how == "another-database":
            index.execute("UPDATE state SET source = 'elsewhere'")
        elif how == "notes-it-never-had":
            index.execute("UPDATE state SET applied = applied + 1000")
        index.execute(
            "INSERT INTO approvals_proposal_text(rowid, summary) VALUES (?, 'nginx')",
            (kept.pk + 1000,),
        )
    if how == "no-file":
        index_sqlite.forget_connections()
        for path in index_sqlite.index_files(connection.settings_dict["NAME"]):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    other = make(agent, "nginx too")
    assert "json_each" not in sql("nginx")
    assert found(reviewer_api, "nginx") == {kept.pk, other.pk}
    Proposal.text_index.catch_up()
    assert "json_each" in sql("nginx")
    assert found(reviewer_api, "nginx") == {kept.pk, other.pk}
    assert_index_matches_the_table()
