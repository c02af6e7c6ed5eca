"""gVisor specifics and the reaper, against the real engine with runsc.

The behaviour gVisor shares with runc (pool, streaming, cancel, cleanliness) is
covered in test_docker_sandbox.py, parametrized over both runtimes.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
import time

import docker
import pytest

from executions.sandboxes import reaper
from executions.sandboxes.base import MemorySink, RunRequest
from executions.sandboxes.gvisor import GVisorSandbox

NO_PYTHON_IMAGE = "airlock-test-no-python:latest"


@pytest.fixture(scope="module")
def client():
    client = docker.from_env(timeout=30)
    yield client
    client.close()


@pytest.fixture(scope="module")
def image_without_python(client) -> str:
    """An image the runner cannot start in: every start of it fails."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("work", "tmp", "etc"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    repository, tag = NO_PYTHON_IMAGE.split(":")
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=tag)
    return NO_PYTHON_IMAGE


def runtime_processes() -> dict[int, str | None]:
    return {
        p.pid: p.container_id()
        for p in reaper.list_processes()
        if (p.is_runsc or p.is_shim) and p.container_id()
    }


def leftovers(before: dict[int, str | None], client) -> list[int]:
    """New runsc/shim processes serving a container that is not running."""
    running = {c["Id"] for c in client.api.containers()}
    return [
        pid for pid, cid in runtime_processes().items() if pid not in before and cid not in running
    ]


def wait_until_none(before, client, within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while (found := leftovers(before, client)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def test_code_runs_under_the_gvisor_kernel(gvisor_ready, make_sandbox):
    sandbox = make_sandbox(GVisorSandbox)
    sink = MemorySink()
    outcome = sandbox.run(RunRequest("python", "import os\nprint(os.uname().release)"), sink)
    assert outcome.success, (outcome, sink.stderr)
    assert outcome.details["runtime"] == "runsc" and outcome.details["isolation"] == "gvisor"
    assert sink.stdout.strip() != os.uname().release  # gVisor reports its own kernel


def test_a_failed_start_leaves_no_runsc_process_behind(
    gvisor_ready, client, image_without_python, make_sandbox
):
    before = runtime_processes()
    sandbox = make_sandbox(GVisorSandbox, mode="oneshot", image=image_without_python)
    outcome = sandbox.run(RunRequest("python", "print(1)"), MemorySink())
    assert outcome.error and "did not start" in outcome.error
    assert wait_until_none(before, client) == []


def test_the_reaper_ends_the_processes_of_a_leaked_start(
    gvisor_ready, client, image_without_python
):
    before = runtime_processes()
    dead_owner = f"{socket.gethostname()}:999999:0"
    created = client.api.create_container(
        image_without_python,
        command=["python3"],
        labels={reaper.LABEL: "1", reaper.OWNER_LABEL: dead_owner},
        host_config=client.api.create_host_config(runtime="runsc", network_mode="none"),
    )
    with pytest.raises(docker.errors.APIError):
        client.api.start(created["Id"])  # fails, leaving runsc and shim processes running
    time.sleep(1.5)
    # Any worker's reaper may get there first (they all sweep dead owners): judge the result.
    reaper.reap_orphans(client, min_age_seconds=1.0)
    assert wait_until_none(before, client) == []
    with pytest.raises(docker.errors.NotFound):
        client.api.inspect_container(created["Id"])


def test_the_reaper_leaves_a_live_owners_containers_alone(gvisor_ready, make_sandbox, client):
    sandbox = make_sandbox(GVisorSandbox, mode="keepalive")
    sandbox.run(RunRequest("python", "print(1)"), MemorySink())
    time.sleep(3)  # the pool's prestarted replacement is up by now
    mine = {"label": f"{reaper.OWNER_LABEL}={sandbox.owner}"}
    before = {c["Id"] for c in client.api.containers(filters=mine)}
    assert before, "no prestarted container to protect"
    reaper.reap_orphans(client)
    assert {c["Id"] for c in client.api.containers(filters=mine)} == before
    again = sandbox.run(RunRequest("python", "print(2)"), MemorySink())
    assert again.success
