"""The embedded deployment end to end: ``manage.py serve --demo`` on a fresh data dir."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from infrastructure.sqlite.checkpoints import BACKSTOP_PAGES
from tests.serving import reviewer_token, start_server

# Its own deployment (serve, manage.py with a data dir of its own): one pass is enough.
pytestmark = pytest.mark.any_database


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


def test_the_data_dir_is_private_and_serve_says_how_scripts_are_isolated(served):
    data = Path(served.data)
    assert data.stat().st_mode & 0o777 == 0o700
    for name in ("secret_key", "airlock.sqlite3"):
        assert (data / name).stat().st_mode & 0o777 == 0o600, name
    assert (data / "broker").stat().st_mode & 0o777 == 0o700
    assert len((data / "secret_key").read_text().strip()) >= 40  # made for this install
    sandbox = json.loads(urllib.request.urlopen(served.base + "/healthz", timeout=10).read())
    isolation = sandbox["checks"]["sandbox"]["isolation"]
    assert f"Sandbox: local · isolation {isolation}" in served.log.read_text()


def test_serve_copies_the_database_log_back_itself_not_the_writers(served):
    for pid in served.children():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"SQLITE_WAL_AUTOCHECKPOINT={BACKSTOP_PAGES}".encode() in environ
    database = Path(served.data) / "airlock.sqlite3"
    before = database.stat().st_mtime_ns
    served.propose_script('print("hi")')  # far fewer pages than any autocheckpoint
    deadline = time.monotonic() + 10
    while database.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert database.stat().st_mtime_ns != before, "nothing copied the log into the database"


def test_errors_outside_the_views_are_json_on_the_real_server(served):
    big = {"action": "script.execute", "parameters": {"code": "#" * (5 * 1024 * 1024)}}
    status, body = served.api("POST", "/api/v1/proposals", big)
    assert (status, body["error"]["type"]) == (413, "request_too_large"), body
    status, body = served.api("GET", "/api/v1/nowhere")
    assert (status, body["error"]["type"]) == (404, "not_found"), body
    status, body = served.api("PUT", "/api/v1/schema/")
    assert (status, body["error"]["type"]) == (405, "method_not_allowed"), body


def test_an_older_install_keeps_its_key_and_loses_its_loose_modes(tmp_path):
    from tests.serving import start_server

    data = tmp_path / "old"
    data.mkdir(mode=0o755)
    (data / "airlock.sqlite3").touch(mode=0o644)
    server = start_server(data)
    try:
        assert (data / "secret_key").read_text() == "airlock-development-key-change-me"
        assert data.stat().st_mode & 0o777 == 0o700
        assert (data / "airlock.sqlite3").stat().st_mode & 0o777 == 0o600
    finally:
        server.stop()


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


def connection_owners(pids: list[int], port: int) -> dict[int, int]:
    """pid → how many established connections to ``port`` it holds (from /proc)."""
    established = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                established.add(fields[9])  # the socket's inode
    owners = {}
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except FileNotFoundError:
                continue  # closed since the listing: one of the process's own, not a client's
            if target.startswith("socket:[") and target[8:-1] in established:
                owners[pid] = owners.get(pid, 0) + 1
    return owners


def test_several_web_processes_share_the_port_and_any_one_answers(tmp_path):
    import socket

    data = tmp_path / "data"
    server = start_server(data, serve_args=["--web-processes", "3"])
    server.data = str(data)
    port = int(server.base.rsplit(":", 1)[1])
    clients = []
    try:
        pids = server.web_processes()
        assert len(pids) == 3, pids
        assert "(3 web processes;" in server.log.read_text()
        for _ in range(24):  # keep-alive connections, each with an answered request
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            clients.append(sock)
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while b'{"status": "alive"}' not in answer:
                received = sock.recv(4096)
                assert received, answer
                answer += received
        owners = connection_owners(pids, port)
        assert sum(owners.values()) == 24, owners
        assert len(owners) >= 2, f"one process took every connection: {owners}"

        # A long-poll on one connection, the decision on others: whichever
        # process each reached, the waiter answers.
        body = server.propose_script("import os\nprint(os.listdir('.'))")
        assert body["status"] == "pending", body
        reviewer = reviewer_token(data)
        with concurrent.futures.ThreadPoolExecutor() as pool:
            waiting = pool.submit(server.api, "GET", f"/api/v1/proposals/{body['id']}?wait=30")
            time.sleep(0.5)
            status, _ = server.api(
                "POST", f"/api/v1/proposals/{body['id']}/reject", {"comment": "no"}, reviewer
            )
            assert status == 200
            status, answer = waiting.result(timeout=30)
        assert (status, answer["status"]) == (200, "rejected"), answer
    finally:
        for sock in clients:
            sock.close()
        server.stop()


def test_a_port_in_use_is_refused_not_shared(served):
    import subprocess
    import sys

    from tests.serving import ROOT

    port = served.base.rsplit(":", 1)[1]
    env = {**os.environ, "AIRLOCK_DATA_DIR": served.data + "-second"}
    second = subprocess.run(
        [sys.executable, "manage.py", "serve", "--port", port, "--no-worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in second.stderr


def test_serve_prints_one_screen_and_keeps_the_workers_logs_in_a_file(tmp_path):
    data = tmp_path / "data"
    server = start_server(data, verbose=False)
    try:
        body = {
            "action": "script.execute",
            "parameters": {"language": "python", "code": "print(1)"},
        }
        status, proposal = server.api(
            "POST", "/api/v1/proposals?wait=30&until=finished", body, token=server.token
        )
        assert status == 201 and proposal["result"]["stdout"] == "1\n", proposal  # a worker ran it
        printed = server.log.read_text()
        for said in (
            "Sandbox: local · isolation",
            "Demo accounts (password for each: airlock-demo):",
            server.token,
            f"Airlock is running at {server.base}/",
            f"Worker and scheduler logs: {data}/logs/",
        ):
            assert said in printed, said
        assert len(printed.splitlines()) <= 24, printed  # one screen
        for noise in ("[tasks]", "SecurityWarning", "celery beat", "Started server process"):
            assert noise not in printed, noise
        worker = (data / "logs" / "worker.log").read_text()
        assert "[tasks]" in worker and "executions.tasks.run_execution" in worker
        assert "beat" in (data / "logs" / "beat.log").read_text()
        assert oct((data / "logs").stat().st_mode & 0o777) == "0o700"
    finally:
        server.stop()
