"""Backups of the embedded deployment: taken while it runs and writes, restored, verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.serving import FOREIGN_ENV, ROOT, lift_agent_limits, manage, start_server

# Its own deployment (serve, manage.py with a data dir of its own): one pass is enough.
pytestmark = pytest.mark.any_database


def run(data_dir, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A management command that may fail: its exit code and output."""
    environment = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    environment.update(env or {}, AIRLOCK_DATA_DIR=str(data_dir))
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True,
        text=True,
    )  # fmt: skip


def count(data_dir, model: str) -> int:
    app, name = model.rsplit(".", 1)
    return int(
        manage(
            data_dir, "shell", "-c", f"from {app} import {name}; print({name}.objects.count())"
        ).split()[-1]
    )


PACE_SECONDS = 0.03


def backed_up_while_proposing(data, destination, env: dict | None = None) -> tuple[str, list[int]]:
    """``manage.py backup --verify`` while an agent proposes: what it said, each proposal's status."""
    server = start_server(data, extra_env=env)
    lift_agent_limits(data, env)  # it proposes as fast as it can, past max_proposals_per_minute
    stop, made = threading.Event(), []

    def keep_proposing():
        # Some tens a second, each run by the worker: writes all through the backup, while
        # leaving the machine to the backup (flat out, the runs took most of the test's time).
        while not stop.wait(PACE_SECONDS):
            body = {"action": "script.execute", "parameters": {"language": "python", "code": "1"}}
            made.append(server.api("POST", "/api/v1/proposals", body)[0])

    writer = threading.Thread(target=keep_proposing)
    writer.start()
    try:
        while len(made) < 10:
            stop.wait(0.05)
        backed = manage(data, "backup", str(destination), "--verify", env=env)
    finally:
        stop.set()
        writer.join()
        server.stop()
    return backed, made


def test_a_backup_taken_while_agents_write_restores_whole_and_verifies(tmp_path):
    data = tmp_path / "data"
    backed, made = backed_up_while_proposing(data, tmp_path / "backup")
    assert "verified: restored into a scratch data directory; audit chain intact" in backed
    assert set(made) == {201}
    manifest = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"airlock.sqlite3", "secret_key"}
    assert oct((tmp_path / "backup").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "backup" / "secret_key").stat().st_mode & 0o777) == "0o600"

    restored = tmp_path / "restored"
    said = manage(restored, "restore", str(tmp_path / "backup"))
    assert f"audit chain up to #{manifest['audit_last_seq']}" in said
    assert "audit chain intact" in manage(restored, "verify_audit")
    taken = count(restored, "approvals.models.Proposal")
    assert 10 <= taken <= len(made)  # those committed when it was taken, each whole
    assert count(restored, "audit.models.AuditEvent") == manifest["audit_last_seq"]

    again = run(restored, "restore", str(tmp_path / "backup"))
    assert again.returncode != 0 and "already holds data" in again.stderr
    assert "restored" in manage(restored, "restore", str(tmp_path / "backup"), "--replace")


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda b: (b / "airlock.sqlite3").write_bytes(b"x"), "airlock.sqlite3 does not match"),
        (lambda b: (b / "secret_key").unlink(), "secret_key is missing"),
        (lambda b: (b / "manifest.json").write_text("{"), "is not a backup"),
    ],
    ids=["changed", "missing", "no-manifest"],
)
def test_a_damaged_backup_is_refused_and_nothing_is_written(tmp_path, damage, said):
    data = tmp_path / "data"
    manage(data, "migrate", "--verbosity", "0")
    manage(data, "backup", str(tmp_path / "backup"))
    damage(tmp_path / "backup")
    target = tmp_path / "target"
    refused = run(target, "restore", str(tmp_path / "backup"))
    assert refused.returncode != 0 and said in refused.stderr
    assert not (target / "airlock.sqlite3").exists()


def test_a_backup_goes_only_into_a_new_or_empty_directory(tmp_path):
    data = tmp_path / "data"
    manage(data, "migrate", "--verbosity", "0")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "something").write_text("x")
    refused = run(data, "backup", str(tmp_path / "full"))
    assert refused.returncode != 0 and "is not an empty directory" in refused.stderr
    unreachable = run(
        data,
        "backup",
        str(tmp_path / "pg"),
        env={"DATABASE_URL": "postgres://x@127.0.0.1:9/x", "SECRET_KEY": "k" * 50},
    )
    assert unreachable.returncode != 0
    assert "cannot reach the database x" in unreachable.stderr
    assert not (tmp_path / "pg").exists()


def test_a_restore_leaves_no_search_index_of_the_database_it_replaces(tmp_path):
    """The index beside the database is not in a backup; one left there would answer for
    rows the restored database does not hold. The worker builds it again."""
    data = tmp_path / "data"
    manage(data, "migrate", "--verbosity", "0")
    catch_up = "from approvals.models import Proposal; print(Proposal.text_index.catch_up())"
    manage(data, "shell", "-c", catch_up)
    index = data / "airlock.sqlite3-text"
    assert index.exists()
    manage(data, "backup", str(tmp_path / "backup"))
    manage(data, "restore", str(tmp_path / "backup"), "--replace")
    assert not index.exists()
    manage(data, "shell", "-c", catch_up)
    assert index.exists()
