"""The scale deployment's backup: ``pg_dump`` of one exported snapshot, ``pg_restore`` back.

The snapshot is exported by a read-only REPEATABLE READ transaction that
also reads the audit chain's end, so the manifest names the last record the
dump holds; ``pg_dump --snapshot`` copies exactly that state while writers
go on (it takes no lock a write waits for). The custom format is compressed
and restorable table by table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

from .manifest import BackupError, checked, empty_or_new, write

DUMP = "airlock.dump"
KIND = "postgresql"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise BackupError(f"{name} is not installed here (Debian: postgresql-client)")
    return found


def _environment(database: dict, name: str | None = None) -> dict:
    """The libpq variables that point PostgreSQL's tools at ``database`` (or its ``name``)."""
    env = dict(os.environ)
    for variable, key in (("PGHOST", "HOST"), ("PGPORT", "PORT"), ("PGUSER", "USER")):
        if database.get(key):
            env[variable] = str(database[key])
    if database.get("PASSWORD"):
        env["PGPASSWORD"] = str(database["PASSWORD"])
    env["PGDATABASE"] = name or database["NAME"]
    return env


def _connect(database: dict, name: str | None = None, **options) -> psycopg.Connection:
    try:
        return psycopg.connect(
            host=database.get("HOST") or None,
            port=database.get("PORT") or None,
            user=database.get("USER") or None,
            password=database.get("PASSWORD") or None,
            dbname=name or database["NAME"],
            connect_timeout=10,
            **options,
        )
    except psycopg.Error as error:
        raise BackupError(
            f"cannot reach the database {name or database['NAME']}: {error}"
        ) from None


def _run(command: list[str], env: dict, what: str) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BackupError(f"{what} failed: {said[0]}")


def back_up(database: dict, destination: Path) -> dict:
    """Dump ``database`` (Django's settings of it) into the new directory ``destination``."""
    pg_dump = _tool("pg_dump")
    dump = destination / DUMP
    with _connect(database) as connection:
        empty_or_new(destination)
        connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        connection.read_only = True
        snapshot = connection.execute("select pg_export_snapshot()").fetchone()[0]
        last = connection.execute("select coalesce(max(seq), 0) from audit_auditevent").fetchone()
        version = connection.info.server_version
        # The snapshot lives as long as this transaction: pg_dump runs inside it.
        _run(
            [pg_dump, "--format=custom", "--no-owner", "--no-privileges"]
            + [f"--snapshot={snapshot}", f"--file={dump}"],
            _environment(database),
            "pg_dump",
        )
    host = f"{database.get('HOST') or 'localhost'}:{database.get('PORT') or 5432}"
    return write(
        destination,
        KIND,
        [dump],
        source=f"{host}/{database['NAME']}",
        server_version=version,
        audit_last_seq=last[0],
        secret_key="not included: SECRET_KEY is set apart (keep it, apart from the backups)",
    )


def holds_rows(database: dict, name: str | None = None) -> bool:
    """Whether any of Airlock's tables in ``name`` (default: the database) has a row."""
    with _connect(database, name) as connection:
        tables = connection.execute(
            "select tablename from pg_tables where schemaname = current_schema()"
            " and tablename not like 'django\\_%'"
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("select 1 from {} limit 1").format(sql.Identifier(table))
            if connection.execute(query).fetchone():
                return True
    return False


def restore(source: Path, database: dict, replace: bool = False, name: str | None = None) -> dict:
    """Restore the backup ``source`` into ``database`` (or the database ``name`` beside it)."""
    manifest = checked(source, KIND)
    pg_restore = _tool("pg_restore")
    if not replace and holds_rows(database, name):
        raise BackupError(
            f"the database {name or database['NAME']} already holds data; restore into an empty "
            "one, or pass --replace to overwrite it (stop Airlock first)"
        )
    # --clean: an empty database may still have the tables (migrate ran); the dump makes them.
    _run(
        [pg_restore, "--no-owner", "--no-privileges", "--clean", "--if-exists"]
        + ["--single-transaction", "--exit-on-error", f"--dbname={name or database['NAME']}"]
        + [str(source / DUMP)],
        _environment(database, name),
        "pg_restore",
    )
    return manifest


def url(database: dict, name: str) -> str:
    """A ``DATABASE_URL`` for the database ``name`` on the same server, as the same user."""
    user = quote(str(database.get("USER") or ""), safe="")
    password = quote(str(database.get("PASSWORD") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = database.get("HOST") or "localhost"
    return f"postgres://{credentials}{host}:{database.get('PORT') or 5432}/{quote(name)}"


@contextmanager
def scratch_database(database: dict) -> Iterator[str]:
    """A new, empty database on the same server, dropped afterwards: its name."""
    name = f"{database['NAME']}_verify_{uuid.uuid4().hex[:8]}"
    with _connect(database, autocommit=True) as connection:
        try:
            connection.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        except psycopg.Error as error:
            raise BackupError(f"cannot make a scratch database to verify in: {error}") from None
    try:
        yield name
    finally:
        with _connect(database, autocommit=True) as connection:
            connection.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )
