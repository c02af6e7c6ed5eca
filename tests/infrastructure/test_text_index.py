"""The trigram index behind ``?q=``: same answers as a scan, read from the index, kept in step."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from approvals.models import Proposal
from infrastructure import text_index

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


@pytest.mark.parametrize("frequent", [5000, 2], ids=["index", "common-texts-scanned"])
def test_a_search_finds_what_a_scan_finds_whatever_it_holds(
    agent, reviewer_api, monkeypatch, frequent
):
    monkeypatch.setattr(text_index, "FREQUENT", frequent)
    make(agent, "Restart Nginx", "the cache is stale")
    make(agent, "drop table", 'cleanup of a "quoted" thing')
    make(agent, "ab", "under_score and 50% off")
    make(agent, "", "x" * 250)
    make(agent, "grow_x", "ÿþ")
    for text in SEARCHES:
        assert found(reviewer_api, text) == scanned(text), text
    assert_index_matches_the_table()
    assert scanned("nginx") and scanned('"') and scanned("%")  # the cases are not all empty


def test_an_edited_or_deleted_proposal_is_found_as_it_is_now(agent, reviewer_api):
    first = make(agent, "restart nginx", "stuck")
    second = make(agent, "print hello", "greet")
    assert found(reviewer_api, "nginx") == {first.pk}
    second.reason = "now about nginx too"
    second.save()
    assert found(reviewer_api, "nginx") == {first.pk, second.pk}
    assert found(reviewer_api, "greet") == set()
    first.status = "approved"  # a change the index does not hold
    first.save(update_fields=["status"])
    first.delete()
    assert found(reviewer_api, "nginx") == {second.pk}
    assert_index_matches_the_table()


def test_a_row_edited_or_deleted_before_any_search_indexed_it_is_found_as_it_is_now(
    agent, reviewer_api
):
    edited = make(agent, "restart nginx", "stuck")
    gone = make(agent, "nginx gone", "")
    edited.summary = "restart apache"
    edited.save()
    gone.delete()
    assert found(reviewer_api, "nginx") == set()
    assert found(reviewer_api, "apache") == {edited.pk}
    assert_index_matches_the_table()


def test_a_periodic_task_indexes_what_was_written_off_the_searches_path(agent, reviewer_api):
    from approvals.core.tasks import index_text
    from console.celery import app

    app.finalize()
    assert app.conf.beat_schedule["index-text"]["task"] == index_text.name
    written = make(agent, "restart nginx")
    make(agent, "print hello")
    assert index_text() == (2 if connection.vendor == "sqlite" else 0)
    assert index_text() == 0
    assert found(reviewer_api, "nginx") == {written.pk}
    assert_index_matches_the_table()


def assert_index_matches_the_table() -> None:
    """SQLite's own check of an FTS5 index against its content table (rank 1)."""
    if connection.vendor == "sqlite":
        Proposal.text_index.catch_up()
        with connection.cursor() as cursor:  # raises "database disk image is malformed"
            cursor.execute(
                "INSERT INTO approvals_proposal_text(approvals_proposal_text, rank) "
                "VALUES ('integrity-check', 1)"
            )


def test_the_executions_list_searches_its_proposals_text(agent, reviewer_api):
    from tests.executions.test_execution_list import ran

    restart = ran(agent, summary="restart nginx")
    ran(agent, summary="print hello", reason="not the web server")
    for text in ("NGINX", "ng"):  # from the index, and by a scan
        response = reviewer_api.get("/api/v1/executions", {"q": text})
        assert response.status_code == 200, response.content
        assert [item["id"] for item in response.json()["items"]] == [restart.pk], text


def plan(text: str) -> str:
    query = Proposal.objects.filter(Proposal.text_index.matching(text))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")  # a few rows: make it show it can
    return query.explain()


def test_a_search_of_three_characters_or_more_reads_the_index(agent, monkeypatch):
    make(agent, "restart nginx", "stuck")
    make(agent, "restart nginx", "again")
    if connection.vendor == "sqlite":
        assert "VIRTUAL TABLE INDEX" in plan("nginx"), plan("nginx")
        assert "VIRTUAL TABLE" not in plan("ng"), plan("ng")  # no trigram in it: a scan
        monkeypatch.setattr(text_index, "FREQUENT", 2)
        assert "VIRTUAL TABLE" not in plan("nginx"), plan("nginx")  # in every row: a scan
        assert "VIRTUAL TABLE INDEX" in plan("stuck"), plan("stuck")
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
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(triggers, ["approvals_proposal"])
        assert cursor.fetchone() == (3,)
    after = make(agent, "nginx again")
    assert found(reviewer_api, "nginx") == {before.pk, after.pk}


@pytest.mark.django_db(transaction=True)
def test_the_index_goes_with_its_migration_and_comes_back_with_the_rows_in_it(agent, reviewer_api):
    kept = make(agent, "restart nginx")
    call_command("migrate", "approvals", "0006", verbosity=0)
    try:
        assert not index_present()
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


def index_present() -> bool:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            return "approvals_proposal_text" in connection.introspection.table_names(cursor)
        return "approvals_proposal_summary_trgm" in connection.introspection.get_constraints(
            cursor, "approvals_proposal"
        )
