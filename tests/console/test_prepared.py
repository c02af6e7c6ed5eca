"""Prepared queries: compiled once per connection, the same rows as the queryset."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from approvals.models import Agent
from console.prepared import Prepared

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
