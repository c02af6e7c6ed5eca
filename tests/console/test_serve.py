"""The embedded deployment end to end: ``manage.py serve --demo`` on a fresh data dir."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from tests.serving import start_server


def processes_with_env(needle: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.fixture
def served(tmp_path):
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    server.data = str(data_dir)
    yield server
    server.stop()


def test_a_curl_proposal_of_print_hi_succeeds_and_sigterm_stops_everything(served):
    body = served.propose_script('print("hi")')
    assert body["status"] == "approved"
    deadline = time.monotonic() + 60
    proposal = body
    while (
        proposal.get("execution_status") not in ("succeeded", "failed")
        and time.monotonic() < deadline
    ):
        _, proposal = served.api("GET", f"/api/v1/proposals/{body['id']}?wait=10")
    _, result = served.api("GET", f"/api/v1/executions/{proposal['execution_id']}")
    assert result["status"] == "succeeded", (result, served.log.read_text()[-3000:])
    assert result["stdout"] == "hi\n"
    assert re.fullmatch(r"[0-9a-f]{64}", result["provenance"]["command_hash"])

    assert processes_with_env(served.data), "serve's children should be running"
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=30) == 0
    time.sleep(0.5)
    assert processes_with_env(served.data) == [], "a process outlived serve"


def test_children_die_with_serve_even_when_it_is_killed(served):
    served.process.kill()
    served.process.wait()
    deadline = time.monotonic() + 20
    while processes_with_env(served.data) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert processes_with_env(served.data) == []


def test_healthz_and_metrics_answer(served):
    with urllib.request.urlopen(served.base + "/healthz", timeout=10) as response:
        health = json.loads(response.read())
    assert health["checks"]["database"]["ok"] is True
    assert health["checks"]["sandbox"]["backend"] == "local"
    with urllib.request.urlopen(served.base + "/metrics", timeout=10) as response:
        text = response.read().decode()
    assert 'airlock_proposals{status="pending"}' in text
