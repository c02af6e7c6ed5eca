"""Backups of the scale deployment's PostgreSQL: pg_dump of one snapshot while agents write,
pg_restore into an empty database, verified in a scratch database that is dropped after.

Against the PostgreSQL on 127.0.0.1:5432, with databases of their own made and dropped here.
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg import sql

from tests.infrastructure.test_backups import backed_up_while_proposing, run
from tests.serving import manage
from tests.support import port_open, require

# Databases of its own on the local PostgreSQL, whatever the run's: one pass is enough.
pytestmark = pytest.mark.any_database

SERVER = "postgres://postgres@127.0.0.1:5432"
KEY = "backup-test-" + "k" * 40


def _admin(statement: sql.Composable, *args) -> list[tuple]:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as connection:
        cursor = connection.execute(statement, args)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def databases():
    """A maker of empty databases, each dropped after the test: ``(name, env)``."""
    require(port_open("127.0.0.1", 5432), "PostgreSQL is not running on 127.0.0.1:5432")
    made = []

    def make() -> tuple[str, dict]:
        name = f"airlock_backup_{uuid.uuid4().hex[:8]}"
        _admin(sql.SQL("create database {}").format(sql.Identifier(name)))
        made.append(name)
        return name, {"DATABASE_URL": f"{SERVER}/{name}", "SECRET_KEY": KEY}

    yield make
    for name in made:
        _admin(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def count(env: dict, table: str) -> int:
    with psycopg.connect(env["DATABASE_URL"]) as connection:
        return connection.execute(f"select count(*) from {table}").fetchone()[0]


def test_a_dump_taken_while_agents_write_restores_whole_and_verifies(tmp_path, databases):
    name, env = databases()
    backed, made = backed_up_while_proposing(tmp_path / "data", tmp_path / "backup", env)
    assert "verified: restored into a scratch database; audit chain intact" in backed
    assert set(made) == {201}
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert (manifest["database"], set(manifest["files"])) == ("postgresql", {"airlock.dump"})
    assert manifest["secret_key"].startswith("not included")
    assert oct((tmp_path / "backup").stat().st_mode & 0o777) == "0o700"
    leftovers = _admin(
        sql.SQL("select datname from pg_database where datname like %s"), f"{name}_verify_%"
    )
    assert leftovers == []  # the scratch database is gone

    empty, into = databases()
    said = manage(tmp_path / "restored", "restore", str(tmp_path / "backup"), env=into)
    assert f"audit chain up to #{manifest['audit_last_seq']}" in said
    assert "audit chain intact" in manage(tmp_path / "restored", "verify_audit", env=into)
    taken = count(into, "approvals_proposal")
    assert 10 <= taken <= len(made)  # those committed when it was taken, each whole
    assert count(into, "audit_auditevent") == manifest["audit_last_seq"]

    again = run(tmp_path / "restored", "restore", str(tmp_path / "backup"), env=into)
    assert again.returncode != 0 and f"the database {empty} already holds data" in again.stderr
    assert "restored" in manage(
        tmp_path / "restored", "restore", str(tmp_path / "backup"), "--replace", env=into
    )
    assert count(into, "approvals_proposal") == taken

    # A backup of one kind never lands in a deployment of the other.
    embedded = run(tmp_path / "sqlite", "restore", str(tmp_path / "backup"))
    assert embedded.returncode != 0 and "is a backup of postgresql" in embedded.stderr


def test_a_damaged_dump_is_refused_before_the_database_is_touched(tmp_path, databases):
    name, env = databases()
    manage(tmp_path, "migrate", "--verbosity", "0", env=env)
    manage(tmp_path, "backup", str(tmp_path / "backup"), env=env)
    dump = tmp_path / "backup" / "airlock.dump"
    dump.write_bytes(dump.read_bytes()[:-10] + b"0123456789")
    _, into = databases()
    refused = run(tmp_path, "restore", str(tmp_path / "backup"), env=into)
    assert refused.returncode != 0 and "airlock.dump does not match its checksum" in refused.stderr
    with psycopg.connect(into["DATABASE_URL"]) as connection:
        assert connection.execute(
            "select count(*) from pg_tables where schemaname = 'public'"
        ).fetchone() == (0,)
