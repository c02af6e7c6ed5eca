"""The published schema is the contract: Schemathesis against a running ``serve``, as each role.

Schemathesis reads ``/api/v1/schema/``, makes requests from it (examples,
coverage of each parameter's edges, random data, and the stateful phase that
follows one call's answer into the next) and checks every answer: no 5xx, a
body that matches the schema for its status, the content type the schema
says. The seed and the number of examples per operation are fixed, so a run
is the same every time and takes seconds. A CLI and an SDK are written from
this schema; it must be true for an agent, a reviewer and an admin alike.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serving import start_server, user_token
from tests.support import require

CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


@contextlib.contextmanager
def database_of_its_own():
    """The environment that points ``serve`` at the suite's kind of database: on the
    PostgreSQL pass, a database made for the run (and dropped after), with Redis."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        yield {}
        return
    import psycopg

    name = f"airlock_contract_{os.getpid()}"
    server_url = url.rsplit("/", 1)[0]
    with psycopg.connect(server_url + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {
            "DATABASE_URL": f"{server_url}/{name}",
            "SECRET_KEY": "contract-test",
            **{k: os.environ[k] for k in ("REDIS_URL",) if k in os.environ},
        }
    finally:
        with psycopg.connect(server_url + "/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("contract")
    with database_of_its_own() as database:
        # A long-poll bounded to a second: generated ``wait`` values must not make a run slow.
        server = start_server(data_dir, extra_env={"LONG_POLL_MAX_SECONDS": "1", **database})
        try:
            yield from _seeded(server, data_dir, database)
        finally:
            server.stop()


def _seeded(server, data_dir: Path, database: dict):
    """Something to list, read, approve and reject (one run, one held), and a token a role."""
    server.propose_script('print("hi")', reason="contract: harmless")
    server.propose_script("import os\nos.system('rm -rf /tmp/x')", reason="contract: risky")
    tokens = {
        "agent": server.token,
        "reviewer": user_token(data_dir, "reviewer", env=database),
        "admin": user_token(data_dir, "admin", env=database),
    }
    yield server, tokens, data_dir


@pytest.mark.parametrize("role", ["agent", "reviewer", "admin"])
def test_every_answer_matches_the_published_schema(deployment, role):
    require(SCHEMATHESIS.exists() or shutil.which("schemathesis"), "schemathesis is not installed")
    server, tokens, data_dir = deployment
    report = data_dir / f"schemathesis-{role}.txt"
    run = subprocess.run(
        [
            str(SCHEMATHESIS if SCHEMATHESIS.exists() else shutil.which("schemathesis")),
            "run",
            f"{server.base}/api/v1/schema/",
            "--header",
            f"Authorization: Bearer {tokens[role]}",
            "--checks",
            CHECKS,
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--seed",
            "20261126",
            "--max-examples",
            "25",
            "--generation-database",
            "none",
            "--workers",
            "1",
            "--request-timeout",
            "30",
            "--no-color",
        ],
        cwd=data_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report.write_text(run.stdout + run.stderr)
    assert run.returncode == 0, f"Schemathesis as {role}:\n{run.stdout[-8000:]}{run.stderr[-2000:]}"
    assert " passed" in run.stdout and "generated" in run.stdout
