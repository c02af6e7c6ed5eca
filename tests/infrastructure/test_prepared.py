"""Prepared queries and inserts: compiled once per connection, the same rows as the ORM's."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Agent, Proposal
from audit.models import AuditEvent
from infrastructure.prepared import Prepared, PreparedInsert, PreparedUpdate

pytestmark = pytest.mark.django_db(transaction=True)


def agents_named(name: str):
    return Agent.objects.filter(name=name).values(
        "id", "capabilities", "created_at", shout=F("token_hint")
    )


def test_it_gives_the_rows_the_queryset_gives_converted_alike():
    for name in ("one", "two"):
        Agent.objects.create(
            name=name, token_hash=(name * 64)[:64], token_hint=name.upper(), capabilities=["x.*"]
        )
    prepared = Prepared(agents_named, name=str)
    for name in ("one", "two", "none"):
        assert prepared.rows(name=name) == list(agents_named(name))
    row = prepared.first(name="two")
    assert row["capabilities"] == ["x.*"]  # JSON decoded
    assert row["created_at"].tzinfo is not None  # an aware datetime, as the ORM gives
    assert prepared.first(name="none") is None


def test_it_compiles_once_per_connection(monkeypatch):
    prepared = Prepared(agents_named, name=str)
    compiled = []
    compile_ = prepared._compile
    monkeypatch.setattr(prepared, "_compile", lambda conn: compiled.append(conn) or compile_(conn))
    with CaptureQueriesContext(connection) as captured:
        for name in ("a", "b", "c"):
            prepared.rows(name=name)
    assert len(captured) == 3
    assert len(compiled) == 1

    def elsewhere():
        try:
            prepared.rows(name="d")
        finally:
            connections.close_all()

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert len(compiled) == 2  # another thread, another connection: compiled for it
    assert compiled[0] is not compiled[1]


def test_a_query_whose_sql_depends_on_an_argument_is_refused():
    prepared = Prepared(
        lambda name: Agent.objects.filter(name__contains=name).values("id"), name=str
    )
    with pytest.raises(ValueError, match="argument name is not a parameter"):
        prepared.rows(name="x")


def test_only_values_querysets_can_be_prepared():
    with pytest.raises(TypeError, match=r"\.values\(\) queryset"):
        Prepared(lambda pk: Agent.objects.filter(pk=pk), pk=int).rows(pk=1)
    with pytest.raises(TypeError, match="only int and str"):
        Prepared(lambda when: Agent.objects.values("id"), when=float)


def proposal_fields(agent: Agent) -> dict:
    return {
        "agent": agent,
        "action": "script.execute",
        "parameters": {"language": "python", "code": "print('é')\n", "nested": [1, None]},
        "summary": "python: print",
        "status": "pending",
        "risk_score": 7,
        "risk_reasons": ["subprocess"],
        "decision_path": {"step": "review", "rule": None},
        "policy_version": 3,
        "required_approvals": 2,
        "created_at": timezone.now(),
        "expires_at": timezone.now() + timedelta(minutes=5),
    }


def test_an_insert_stores_the_row_the_orm_stores():
    agent = Agent.objects.create(name="a", token_hash="h" * 64, token_hint="h")
    fields = proposal_fields(agent)
    by_orm = Proposal.objects.create(**fields)
    prepared = PreparedInsert(Proposal).create(**fields)
    assert isinstance(prepared.pk, int) and prepared.pk == by_orm.pk + 1
    assert not prepared._state.adding
    stored = {row.pop("id"): row for row in Proposal.objects.values()}
    # auto_now: set by the field's pre_save, as save() sets it
    assert stored[prepared.pk].pop("updated_at") >= stored[by_orm.pk].pop("updated_at")
    assert stored[prepared.pk] == stored[by_orm.pk]  # defaults, JSON and datetimes alike
    assert stored[prepared.pk]["parameters"]["code"] == "print('é')\n"
    assert stored[prepared.pk]["approvals_count"] == 0  # a model default
    assert Proposal.objects.get(pk=prepared.pk).created_at == fields["created_at"]


def test_a_row_prepared_ahead_is_stored_as_created_with_its_late_values():
    from executions.models import Execution

    agent = Agent.objects.create(name="a", token_hash="h" * 64, token_hint="h")
    fields = proposal_fields(agent)
    insert = PreparedInsert(Proposal)
    with CaptureQueriesContext(connection) as preparing:
        row = insert.prepare(**fields)
    with CaptureQueriesContext(connection) as inside, transaction.atomic():
        execution = Execution.objects.create(action="script.execute", parameters={})
        late = insert.insert(row, execution=execution)
    assert not preparing.captured_queries  # nothing of it waits for the transaction
    assert sum(query["sql"].startswith("INSERT") for query in inside.captured_queries) == 2
    by_create = insert.create(**fields, execution=None)
    stored = {row.pop("id"): row for row in Proposal.objects.values()}
    assert stored[late.pk].pop("execution_id") == execution.pk == late.execution_id
    assert stored[by_create.pk].pop("execution_id") is None
    stored[late.pk].pop("updated_at"), stored[by_create.pk].pop("updated_at")
    assert stored[late.pk] == stored[by_create.pk]


def test_a_row_prepared_on_one_thread_is_inserted_on_another_connection():
    agent = Agent.objects.create(name="a", token_hash="h" * 64, token_hint="h")
    insert = PreparedInsert(Proposal)
    row = insert.prepare(**proposal_fields(agent))
    done = []

    def elsewhere():
        try:
            done.append(insert.insert(row).pk)
        finally:
            connections.close_all()

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    stored = Proposal.objects.values("parameters", "created_at").get(pk=done[0])
    assert stored == {"parameters": row.instance.parameters, "created_at": row.instance.created_at}


def test_an_insert_compiles_once_per_connection_and_runs_one_statement(monkeypatch):
    insert = PreparedInsert("audit.AuditEvent")  # a label, for modules loaded before apps
    compiled = []
    compile_ = insert._compile
    monkeypatch.setattr(
        insert, "_compile", lambda conn, sample: compiled.append(conn) or compile_(conn, sample)
    )
    with CaptureQueriesContext(connection) as captured:
        for seq in (1, 2, 3):
            insert.create(seq=seq, created_at=timezone.now(), actor="t", verb="v", hash=str(seq))
    assert len(captured) == 3 and captured[0]["sql"].lstrip().upper().startswith("INSERT")
    assert len(compiled) == 1
    assert list(AuditEvent.objects.order_by("seq").values_list("seq", "data")) == [
        (1, {}),  # the field's default
        (2, {}),
        (3, {}),
    ]


def test_only_models_with_an_automatic_key_can_be_inserted_so():
    from django.contrib.sessions.models import Session

    from infrastructure.models import LayerMessage

    assert PreparedInsert(LayerMessage).create(group="g", origin="", payload="{}").pk
    with pytest.raises(TypeError, match="automatic key"):  # its key is the session's string
        PreparedInsert(Session).create(session_key="k", session_data="", expire_date=timezone.now())
    assert not Session.objects.exists()


def test_a_prepared_update_changes_the_rows_and_answers_them_as_the_orm_reads_them():
    agent = Agent.objects.create(name="a", token_hash="h" * 64, token_hint="h")
    first, second, third = (Proposal.objects.create(**proposal_fields(agent)) for _ in range(3))
    update = PreparedUpdate(Proposal)
    for proposal, count in ((first, 1), (second, 2)):  # the second runs the statement made
        decided_at = timezone.now()
        with CaptureQueriesContext(connection) as captured:
            [changed] = update.returning(
                {"pk": proposal.pk, "status": "pending"},
                status="approved",
                decided_at=decided_at,
                approvals_count=count,
                risk_reasons=["set", {"nested": None}],
            )
        assert len(captured) == 1  # the change and its read: one statement
        assert isinstance(changed, Proposal) and not changed._state.adding
        assert changed.__dict__.keys() >= {"status", "parameters", "agent_id", "created_at"}
        stored = Proposal.objects.get(pk=proposal.pk)
        for field in Proposal._meta.concrete_fields:  # JSON decoded, datetimes aware, as stored
            assert getattr(changed, field.attname) == getattr(stored, field.attname), field.name
        assert (changed.status, changed.approvals_count, changed.decided_at) == (
            "approved",
            count,
            decided_at,
        )
        assert changed.parameters["nested"] == [1, None]
        assert changed.risk_reasons == ["set", {"nested": None}]
    assert Proposal.objects.get(pk=third.pk).status == "pending"  # outside the filter


def test_a_prepared_update_answers_nothing_when_the_guard_fails():
    agent = Agent.objects.create(name="a", token_hash="h" * 64, token_hint="h")
    proposal = Proposal.objects.create(**proposal_fields(agent))
    update = PreparedUpdate(Proposal)
    assert update.returning({"pk": proposal.pk, "status": "approved"}, status="denied") == []
    assert Proposal.objects.get(pk=proposal.pk).status == "pending"


def test_a_prepared_update_sets_only_columns_of_its_own_table():
    with pytest.raises(TypeError, match="not a column"):
        PreparedUpdate(Proposal).returning({"pk": 1}, decisions=[])


@pytest.mark.django_db
def test_an_int_no_key_holds_finds_no_row_as_the_orm_would():
    """SQLite overflows on an int past 64 bits; the ORM answers "no rows", and so does this."""
    from approvals.agents.api import _proposal_row

    for pk in (2**63, 10**40, -(2**63) - 1):
        assert _proposal_row.first(pk=pk) is None
    assert _proposal_row.first(pk=2**63 - 1) is None  # the largest key: a query, no error
