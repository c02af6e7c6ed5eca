"""The scale deployment's pooled PostgreSQL connections: checked as they leave the pool, cheaply.

Run against the PostgreSQL on 127.0.0.1:5432 in every pass (the embedded
pass included), through Django's connection handling with Airlock's backend.
"""

from __future__ import annotations

import os
import time

import psycopg
import pytest
from django.db.utils import ConnectionHandler
from psycopg_pool import ConnectionPool

from tests.support import port_open, require

SERVER = {"HOST": "127.0.0.1", "PORT": 5432, "USER": "postgres", "NAME": "postgres"}


@pytest.fixture
def pooled(django_db_blocker):
    """A DatabaseWrapper of ``infrastructure.postgres`` with a pool of one connection, as settings make it."""
    require(port_open("127.0.0.1", 5432), "PostgreSQL is not running on 127.0.0.1:5432")
    alias = f"pool_check_{os.getpid()}"
    settings = {
        **SERVER,
        "ENGINE": "infrastructure.postgres",
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {"pool": {"min_size": 1, "max_size": 1, "timeout": 5}},
    }
    wrapper = ConnectionHandler({"default": settings, alias: settings})[alias]
    with django_db_blocker.unblock():  # a database of its own, not the test database
        yield wrapper
        wrapper.close()
        wrapper.close_pool()


def query(wrapper, sql: str) -> tuple:
    """One statement on a connection from the pool, given back after it as at a request's end."""
    try:
        with wrapper.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()
    finally:
        wrapper.close()


@pytest.fixture
def full_checks(monkeypatch) -> list[int]:
    """psycopg's own check (a round trip) as it runs: the backend pids it was run on."""
    checked = []
    own = ConnectionPool.check_connection

    def counted(conn):
        checked.append(conn.info.backend_pid)
        own(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    return checked


def test_a_quiet_connection_leaves_the_pool_without_a_round_trip(pooled, full_checks):
    pids = {query(pooled, "SELECT pg_backend_pid()")[0] for _ in range(5)}
    assert len(pids) == 1  # the pool's one connection, each time
    assert full_checks == []


def test_a_connection_the_server_ended_is_replaced_before_a_query_meets_it(pooled, full_checks):
    (ended,) = query(pooled, "SELECT pg_backend_pid()")
    admin_url = "postgresql://{USER}@{HOST}:{PORT}/{NAME}".format(**SERVER)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [ended])
        deadline = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [ended]).fetchone():
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.05)
    (now,) = query(pooled, "SELECT pg_backend_pid()")  # no error: a new connection
    assert now != ended
    assert full_checks == [ended]  # the server had spoken: checked in full, and failed
