"""The scale deployment backs itself up: pg_dump of one snapshot from a worker, verified in a
scratch database, while agents go on proposing."""

from __future__ import annotations

import json
import threading

from .stack import Agent, Stack


def test_a_backup_from_a_worker_verifies_while_agents_propose(stack: Stack, agent: Agent):
    worker = stack.worker("host-a")
    stop, made = threading.Event(), []

    def keep_proposing():
        while not stop.is_set():
            made.append(agent.call("POST", "/api/v1/proposals", json={
                "action": "script.execute", "parameters": {"language": "python", "code": "1"}
            }).status_code)  # fmt: skip

    writer = threading.Thread(target=keep_proposing)
    writer.start()
    try:
        said = stack.docker(
            "exec", worker, "python", "manage.py", "backup", "/tmp/airlock-backup", "--verify"
        )
    finally:
        stop.set()
        writer.join()
    assert "verified: restored into a scratch database; audit chain intact" in said
    assert made and set(made) <= {200, 201}  # 200: sent again with its key after a lost answer
    manifest = json.loads(stack.docker("exec", worker, "cat", "/tmp/airlock-backup/manifest.json"))
    assert manifest["database"] == "postgresql" and manifest["audit_last_seq"] > 0
    stack.docker("exec", worker, "rm", "-rf", "/tmp/airlock-backup")
