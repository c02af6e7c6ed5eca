"""The gate as a process between real clients and the real engine.

Through it, the docker and gvisor backends run code and the Docker actions act
on the containers the rules allow; straight at it, with a raw HTTP client as
code that escaped into a worker would use, every call that would reach beyond
that is refused: a privileged create, a host bind mount, ``exec`` into a
container Airlock did not start, the engine's own ``/info``. A client killed
with SIGKILL while its sandbox runs leaves no container behind.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import docker
import pytest
import requests

from executions.sandboxes.base import Limits, MemorySink, RunRequest
from executions.sandboxes.docker import DockerSandbox
from executions.sandboxes.gvisor import GVisorSandbox
from executions.sandboxes.reaper import LABEL as SANDBOX_LABEL
from tests.executions.conftest import require_backend
from tests.executions.test_docker_actions import run, wait_for_logs
from tests.support import assert_container_removed, wait_for

from .conftest import ROOT, Gate, running_gate
from .test_rules import sandbox_create

pytestmark = pytest.mark.docker


def raw(gate: Gate, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(
        method, f"http://127.0.0.1:{gate.port}/v1.41{path}", timeout=30, **kwargs
    )


def refused(response: requests.Response, why: str) -> None:
    assert response.status_code == 403, (response.status_code, response.text[:300])
    assert why in response.json()["message"], response.json()


@pytest.mark.parametrize("backend", ["docker", "gvisor"])
@pytest.mark.parametrize("mode", ["keepalive", "oneshot"])
def test_the_sandbox_backends_run_through_the_gate(gate_env, backend, mode):
    require_backend(backend)
    cls = GVisorSandbox if backend == "gvisor" else DockerSandbox
    sandbox = cls(mode=mode, client=docker.DockerClient(base_url=gate_env.url))
    try:
        outcomes = []
        for i in range(3):
            sink = MemorySink()
            outcome = sandbox.run(RunRequest("python", f"print({i} * 7)", Limits()), sink)
            outcomes.append((outcome.exit_code, outcome.error, sink.stdout))
        probe = MemorySink()
        escaped = sandbox.run(
            RunRequest(
                "python", "import socket; socket.create_connection(('1.1.1.1', 53), 2)", Limits()
            ),
            probe,
        )
    finally:
        sandbox.close()
    assert outcomes == [(0, None, "0\n"), (0, None, "7\n"), (0, None, "14\n")]
    assert escaped.exit_code != 0 and "Error" in probe.stderr  # no network by default
    assert sandbox.probe().ok


def test_a_session_runs_through_the_gate(gate_env):
    require_backend("docker")
    sandbox = DockerSandbox(client=docker.DockerClient(base_url=gate_env.url), spare=False)
    try:
        session = sandbox.open_session()
        first, second = MemorySink(), MemorySink()
        set_x = session.execute("x = 6 * 7", first)
        session.execute("print(x)", second)
        container = session._transport.container
        session.close()
    finally:
        sandbox.close()
    assert set_x.error is None and second.stdout == "42\n"
    assert_container_removed(container)


def test_forbidden_calls_straight_at_the_gate_are_refused(gate, client, start_container):
    require_backend("docker")
    other = start_container(labels={"airlock.test": "not-allowed"})
    target = start_container()
    privileged = sandbox_create()
    privileged["HostConfig"]["Privileged"] = True
    bind = sandbox_create()
    bind["HostConfig"]["Binds"] = ["/:/host:rw"]
    shell = {"Image": "airlock-sandbox:latest", "Cmd": ["sh"], "HostConfig": {"Privileged": True}}

    refused(raw(gate, "POST", "/containers/create", json=privileged), "HostConfig.Privileged")
    refused(raw(gate, "POST", "/containers/create", json=bind), "HostConfig.Binds")
    refused(raw(gate, "POST", "/containers/create", json=shell), "Cmd")
    refused(raw(gate, "POST", f"/containers/{other.id}/exec", json={"Cmd": ["id"]}), "exec")
    refused(raw(gate, "GET", "/info"), "not a call Airlock makes")
    refused(raw(gate, "POST", f"/containers/{other.name}/attach?stream=1"), "not one Airlock")
    refused(
        raw(gate, "POST", f"/containers/{target.name}/attach?stream=1"), "not an Airlock sandbox"
    )
    refused(raw(gate, "POST", f"/containers/{other.name}/stop"), "not one Airlock may act on")
    refused(raw(gate, "DELETE", f"/containers/{other.name}?force=1"), "not one Airlock may act on")
    chunked = raw(gate, "POST", "/containers/create", data=iter([b"{}"]))
    assert chunked.status_code == 400
    assert client.containers.get(other.id).status == "running"  # nothing reached it
    created = [c.name for c in client.containers.list(all=True, filters={"ancestor": "airlock-sandbox:latest"})
               if c.attrs["HostConfig"]["Privileged"]]  # fmt: skip
    assert created == []
    assert "refused POST /v1.41/containers/create" in gate.logged()


def test_a_sandbox_is_out_of_reach_of_any_other_client(gate, client):
    """Another worker (here: another loopback address) cannot attach to, stop or remove it."""
    require_backend("docker")
    created = raw(gate, "POST", "/containers/create", json=sandbox_create())
    assert created.status_code == 201, created.text
    sandbox = created.json()["Id"]
    try:
        for method, path in [("POST", f"/containers/{sandbox}/attach?stream=1&stdin=1"),
                             ("POST", f"/containers/{sandbox}/start"),
                             ("POST", f"/containers/{sandbox}/kill"),
                             ("DELETE", f"/containers/{sandbox}?force=1")]:  # fmt: skip
            other = http.client.HTTPConnection(
                "127.0.0.1", gate.port, source_address=("127.0.0.2", 0)
            )
            other.request(method, "/v1.41" + path)
            answer = other.getresponse()
            body = json.loads(answer.read())
            other.close()
            assert answer.status == 403 and "another client started it" in body["message"], body
        assert client.api.inspect_container(sandbox)["State"]["Status"] == "created"
    finally:
        assert raw(gate, "DELETE", f"/containers/{sandbox}?force=1").status_code == 204


def test_a_missing_container_is_a_404_with_dockers_own_body(gate):
    response = raw(gate, "GET", "/containers/airlock-no-such-container/json")
    assert response.status_code == 404
    assert "No such container" in response.json()["message"]


def test_docker_actions_act_through_the_gate_only_on_allowed_containers(
    gate_env, client, start_container
):
    allowed = start_container()
    other = start_container(labels={"airlock.test": "not-allowed"})
    wait_for_logs(client, allowed, "line 5")

    inspected, sink = run("docker.inspect_container", {"container": allowed.name})
    logs, log_sink = run("docker.container_logs", {"container": allowed.name, "tail": 2})
    restarted, _ = run("docker.restart_container", {"container": allowed.name, "timeout": 1})
    stopped, _ = run("docker.stop_container", {"container": allowed.name, "timeout": 1})
    started, _ = run("docker.start_container", {"container": allowed.name})
    pruned, _ = run("docker.prune_networks", {})
    refusal, refusal_sink = run("docker.stop_container", {"container": other.name})

    assert inspected.success and json.loads(sink.stdout)["Id"] == allowed.id
    assert logs.success and log_sink.stdout == "line 4\nline 5\n"
    assert restarted.success and stopped.success and started.success and pruned.success
    assert client.containers.get(allowed.id).status == "running"
    assert not refusal.success
    assert f"container {other.name} is not one Airlock may act on" in refusal_sink.stderr
    assert "label:airlock.test=docker-actions" in refusal_sink.stderr
    assert client.containers.get(other.id).status == "running"


def test_the_gate_refuses_an_action_the_worker_did_not_check(gate, start_container):
    """A worker whose own rules were loosened still cannot stop what the gate does not allow."""
    other = start_container(labels={"airlock.test": "not-allowed"})
    engine = docker.DockerClient(base_url=gate.url)
    with pytest.raises(docker.errors.APIError, match="not one Airlock may act on"):
        engine.api.stop(other.id, timeout=1)
    with pytest.raises(docker.errors.APIError, match="not one Airlock may act on"):
        engine.api.restart(other.name, timeout=1)


KILLED_CLIENT = """
import sys
import docker
import django
from django.conf import settings
settings.configure()
from executions.sandboxes.base import Limits, RunRequest
from executions.sandboxes.docker import DockerSandbox

class Sink:
    def write(self, stream, data):
        sys.stdout.write(data.decode()); sys.stdout.flush()

sandbox = DockerSandbox(client=docker.DockerClient(base_url=sys.argv[1]), spare=False)
sandbox.run(RunRequest("python", "import time; print('running', flush=True); time.sleep(120)",
                       Limits(timeout_seconds=300)), Sink())
"""


def test_a_client_killed_mid_run_leaves_no_sandbox_container(gate, client):
    require_backend("docker")
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_CLIENT), gate.url],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout.readline() == "running\n", process.stderr.read()
        ours = [
            c for c in client.api.containers(filters={"label": SANDBOX_LABEL})
            if f":{process.pid}:" in c["Labels"].get("airlock.owner", "")
        ]  # fmt: skip
        assert len(ours) == 1
        os.kill(process.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert_container_removed(ours[0]["Id"], within=15)
        print(f"[gate] sandbox gone {time.monotonic() - killed_at:.1f} s after its client")
    finally:
        process.kill()
        process.wait()
    wait_for(lambda: "its stream ended" in gate.logged(), 5)


def test_the_reaper_through_the_gate_removes_a_dead_workers_sandbox(gate, client):
    """What a worker that died left (here: created, never attached) goes at the next pass."""
    require_backend("docker")
    from executions.sandboxes import reaper

    body = sandbox_create()
    body["Labels"]["airlock.owner"] = f"{socket.gethostname()}:999999:0"  # no such process
    created = raw(gate, "POST", "/containers/create", json=body)
    assert created.status_code == 201, created.text
    orphan = created.json()["Id"]
    through_gate = docker.DockerClient(base_url=gate.url)

    report = reaper.reap_orphans(through_gate, min_age_seconds=0)

    assert orphan[:12] in report.containers
    assert_container_removed(orphan)


def test_the_reaper_through_the_gate_leaves_the_hosts_other_containers_running(
    gate, client, start_container
):
    """Behind the gate the reaper sees sandboxes only: the host's other containers, whose
    shims it also sees in the process list, are not strays (it asks the engine first)."""
    from executions.sandboxes import reaper

    other = start_container("sleep 600", labels={})
    time.sleep(1.2)  # older than the pass's minimum age
    shims = {p.pid for p in reaper.list_processes() if p.is_shim and p.mentions(other.id)}
    assert shims
    report = reaper.reap_orphans(docker.DockerClient(base_url=gate.url), min_age_seconds=1)
    assert not shims & set(report.processes)
    assert shims <= {p.pid for p in reaper.list_processes()}
    other.reload()
    assert other.status == "running"


def test_an_engine_that_is_not_there_is_a_502_that_says_so(tmp_path):
    with running_gate(tmp_path / "gate.log", str(tmp_path / "no-engine.sock")) as gate:
        for method, path in [("GET", "/_ping"), ("GET", "/containers/anything/json")]:
            response = raw(gate, method, path)
            assert response.status_code == 502, (path, response.text)
            assert "cannot reach the engine" in response.json()["message"]
