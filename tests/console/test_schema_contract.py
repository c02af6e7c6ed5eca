"""The published schema is the contract: Schemathesis against a running ``serve``, as each role.

Schemathesis reads ``/api/v1/schema/``, makes requests from it (examples,
coverage of each parameter's edges, random data, and the stateful phase that
follows one call's answer into the next) and checks every answer: no 5xx, a
body that matches the schema for its status, the content type the schema
says. The seed and the number of examples per operation are fixed, so a run
is the same every time. A CLI and an SDK are written from this schema; it must
be true for an agent, a reviewer and an admin alike.

Random integers are small, and the coverage phase steps past only the bounds a
schema declares, so neither reaches a number the database cannot hold
(``/api/v1/executions/9999999999999999999`` was a 500 on SQLite). The run's
configuration (``CONFIGURATION``) gives the fuzzer a dictionary of such numbers,
the edges of 32- and 64-bit integers and past them, with the ids of the rows the
deployment was seeded with: half of the path ids it sends, a fifth of any other
integer. Operations with a path parameter get twice the examples. The schema
publishes the range of a path id (``infrastructure.converters``), so the
coverage phase also sends its largest and one past it. About 30 s a role.
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
ID_MAX = 2**63 - 1
# The largest 32- and 64-bit signed integers, one past each, and two ids a fuzzer sent
# (500s on SQLite until a URL took only the ids a key can hold).
EDGES = [2**31 - 1, 2**31, ID_MAX, ID_MAX + 1, 9999999999999999999, 160580086852608884736]
CONFIGURATION = """
[dictionaries.edges]
values = {values}

[parameters."path.id"]
dictionary = "edges"
probability = 0.5

[generation.dictionaries.integer]
dictionary = "edges"
probability = 0.2

[[operations]]
include-path-regex = "[{{]"  # a path with a parameter
generation.max-examples = 50
"""


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
    """Something to list, read, approve and reject (one run, one held), and a token a role;
    the run's configuration, with the ids of those rows among the values it tries."""
    ran = server.propose_script('print("hi")', reason="contract: harmless")
    held = server.propose_script("import os\nos.system('rm -rf /tmp/x')", reason="contract: risky")
    tokens = {
        "agent": server.token,
        "reviewer": user_token(data_dir, "reviewer", env=database),
        "admin": user_token(data_dir, "admin", env=database),
    }
    ids = {ran["id"], held["id"], ran.get("execution_id")} - {None}
    values = ", ".join(str(value) for value in sorted(ids) + EDGES)
    (data_dir / "schemathesis.toml").write_text(CONFIGURATION.format(values=f"[{values}]"))
    yield server, tokens, data_dir


@pytest.mark.parametrize("role", ["agent", "reviewer", "admin"])
def test_every_answer_matches_the_published_schema(deployment, role):
    require(SCHEMATHESIS.exists() or shutil.which("schemathesis"), "schemathesis is not installed")
    server, tokens, data_dir = deployment
    report = data_dir / f"schemathesis-{role}.txt"
    run = subprocess.run(
        [
            str(SCHEMATHESIS if SCHEMATHESIS.exists() else shutil.which("schemathesis")),
            "--config-file",
            str(data_dir / "schemathesis.toml"),
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


def test_every_path_id_publishes_its_range(deployment):
    """What the coverage phase steps past: 0 to the largest 64-bit key, the ids a URL takes
    (any number in a path is one: an ``<int:…>`` would show without its range)."""
    server, tokens, _ = deployment
    status, schema = server.api("GET", "/api/v1/schema/?format=json", token=tokens["agent"])
    assert status == 200
    ids = {
        (path, method): parameter["schema"]
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "path" and parameter["schema"].get("type") != "string"
    }
    expected = {"type": "integer", "format": "int64", "minimum": 0, "maximum": ID_MAX}
    assert len(ids) >= 10
    assert {where: shown for where, shown in ids.items() if shown != expected} == {}
