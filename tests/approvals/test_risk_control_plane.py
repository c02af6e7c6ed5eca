"""Code that reaches for Airlock's own control plane scores high enough for a person to look."""

from __future__ import annotations

import pytest
from django.conf import settings

from approvals.policy.risk import assess
from approvals.policy.rules import DEFAULT_POLICY

AUTO_APPROVE_BELOW = DEFAULT_POLICY["auto_approve_below"]


def script(code: str, language: str = "python") -> dict:
    return {"language": language, "code": code}


def score(code: str, language: str = "python", action: str = "script.execute"):
    return assess(action, script(code, language), 2)


def assert_waits_for_a_person(result, because: str) -> None:
    """Scored at or above the auto-approve threshold, with a reason that says ``because``."""
    assert result.score >= AUTO_APPROVE_BELOW, result
    assert any(because in reason for reason in result.reasons), result


def test_the_database_rewrite_that_ran_unreviewed_now_waits_for_a_person():
    database = settings.DATABASES["default"]["NAME"]
    code = (
        "import sqlite3\n"
        f"db = sqlite3.connect({str(database)!r})\n"
        "db.execute('create table owned (x)')\n"
    )
    result = score(code)
    assert result.score >= AUTO_APPROVE_BELOW
    assert any("database client (sqlite3)" in reason for reason in result.reasons)
    assert any("Airlock's own database" in reason for reason in result.reasons)


@pytest.mark.parametrize(
    ("language", "code", "client"),
    [
        ("python", "import psycopg\npsycopg.connect('dbname=airlock')", "psycopg"),
        ("python", "from redis import Redis\nRedis().keys()", "redis"),
        ("python", "import psycopg2", "psycopg2"),
        ("javascript", "const { Client } = require('pg'); new Client().connect()", "pg"),
        ("javascript", "import Redis from 'ioredis'", "ioredis"),
        ("bash", "redis-cli keys '*'", "redis-cli"),
        ("bash", "echo 'select 1' | psql -U postgres", "psql"),
        ("bash", "sqlite3 var/airlock.sqlite3 .dump", "sqlite3"),
    ],
)
def test_database_clients_raise_the_score_with_a_reason(language, code, client):
    assert_waits_for_a_person(score(code, language), f"database client ({client})")


@pytest.mark.parametrize(
    ("language", "code", "address"),
    [
        ("python", "import socket\nsocket.create_connection(('127.0.0.1', 6379))", "127.0.0.1"),
        (
            "python",
            "import urllib.request\nurllib.request.urlopen('http://localhost:8000/')",
            "localhost",
        ),
        ("javascript", "require('net').connect(5432, '::1')", "::1"),
        ("bash", "exec 3<>/dev/tcp/127.0.0.1/5432", "127.0.0.1"),
        ("bash", "curl -s http://0.0.0.0:8000/api/v1/proposals", "0.0.0.0"),
    ],
)
def test_loopback_addresses_raise_the_score_with_a_reason(language, code, address):
    assert_waits_for_a_person(score(code, language), f"loopback address ({address})")


def test_paths_of_the_data_dir_and_checkout_raise_the_score():
    for what, path in (("data dir", settings.DATA_DIR), ("checkout", settings.BASE_DIR)):
        result = score(f"print(open('{path}/console/settings.py').read())")
        assert_waits_for_a_person(result, f"Airlock's own {what}")


@pytest.mark.parametrize("engine", ["infrastructure.sqlite", "django.db.backends.sqlite3"])
def test_a_sqlite_database_kept_outside_the_data_dir_is_named(monkeypatch, engine):
    database = settings.DATABASES["default"]
    monkeypatch.setitem(database, "ENGINE", engine)
    monkeypatch.setitem(database, "NAME", "/srv/airlock-db/airlock.sqlite3")
    result = score("print(open('/srv/airlock-db/airlock.sqlite3', 'rb').read(100))")
    assert_waits_for_a_person(result, "Airlock's own database (")


def test_host_commands_are_read_the_same_way():
    result = assess("host.exec", {"command": "redis-cli -h 127.0.0.1 flushall"}, 3)
    reasons = " ".join(result.reasons)
    assert "database client (redis-cli)" in reasons and "loopback address" in reasons


@pytest.mark.parametrize(
    "code",
    [
        "print(1)",
        "print('the sandbox works in /work/main.py')",  # the run's own path, not the checkout
        "import json\nprint(json.dumps({'host': 'example.com'}))",
        "x = 127.5\nprint(x)",
        "print('localhostname')",
    ],
)
def test_harmless_code_stays_harmless(code):
    result = score(code)
    assert not [r for r in result.reasons if "loopback" in r or "Airlock's own" in r], result
    assert result.score < AUTO_APPROVE_BELOW, result
