"""Docker actions against a real Docker engine and real containers the tests start.

No registry is reachable here, so the tests import a tiny image from the host's
static busybox (Debian's ``busybox-static``) once, or fall back to the locally
built sandbox image. Without an engine the tests skip, and under ``CI=true``
they fail instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import tarfile
import time
import uuid
from collections.abc import Iterator

import pytest
from docker.client import DockerClient
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from rest_framework import serializers

from executions.actions import ActionContext, get_action
from executions.sandboxes.base import MemorySink
from executions.sandboxes.reaper import LABEL as SANDBOX_LABEL
from executions.sandboxes.reaper import OWNER_LABEL, owner_label
from tests.support import require

pytestmark = pytest.mark.docker

TEST_IMAGE = "airlock-test-busybox:latest"
FALLBACK_IMAGE = "airlock-sandbox:latest"
LABEL = "airlock.test"
LABEL_VALUE = "docker-actions"

# Writes to both streams, then idles; exits promptly on SIGTERM so `stop` is quick.
CHATTY = (
    "echo hello from stdout; sleep 0.1; echo hello from stderr >&2; sleep 0.1; "
    "for i in 1 2 3 4 5; do echo line $i; done; "
    "trap 'exit 0' TERM; while :; do sleep 0.1; done"
)
CONTAINER_ACTIONS = (
    "docker.restart_container",
    "docker.stop_container",
    "docker.start_container",
    "docker.inspect_container",
    "docker.container_logs",
)


def require_engine() -> DockerClient:
    """A client for the engine, or skip (fail under CI=true) with the reason."""
    try:
        client = DockerClient.from_env(timeout=10)
        client.ping()
    except DockerException as exc:
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        require(False, f"no Docker engine answers at {where}: {exc}")
    return client


def busybox_rootfs() -> bytes:
    """A root filesystem tarball: a static busybox and a link per applet."""
    busybox = shutil.which("busybox")
    assert busybox, "busybox not found"
    applets = os.popen(f"{busybox} --list").read().split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(busybox, arcname="bin/busybox")
        for applet in applets:
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for directory in ("tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def client() -> Iterator[DockerClient]:
    client = require_engine()
    yield client
    client.close()


@pytest.fixture(scope="module")
def image(client: DockerClient) -> str:
    try:
        client.images.get(TEST_IMAGE)
        return TEST_IMAGE
    except ImageNotFound:
        pass
    if shutil.which("busybox"):
        repository, tag = TEST_IMAGE.split(":")
        client.api.import_image_from_data(busybox_rootfs(), repository=repository, tag=tag)
        return TEST_IMAGE
    try:
        client.images.get(FALLBACK_IMAGE)
        return FALLBACK_IMAGE
    except ImageNotFound:
        pytest.fail(
            f"no test image: install busybox-static (for {TEST_IMAGE}) or build {FALLBACK_IMAGE}"
        )


@pytest.fixture
def start_container(client: DockerClient, image: str) -> Iterator:
    started: list[Container] = []

    def start(script: str = CHATTY, **kwargs) -> Container:
        container = client.containers.run(
            image,
            ["sh", "-c", script],
            entrypoint=[],
            name=f"airlock-test-{uuid.uuid4().hex[:12]}",
            labels=kwargs.pop("labels", {LABEL: LABEL_VALUE}),
            network_mode=kwargs.pop("network_mode", "none"),
            detach=True,
            **kwargs,
        )
        started.append(container)
        return container

    yield start
    for container in started:
        with contextlib.suppress(NotFound, APIError):  # APIError: already being removed
            container.remove(force=True)


@pytest.fixture
def container(start_container, client: DockerClient) -> Container:
    container = start_container()
    wait_for_logs(client, container, "line 5")
    return container


def wait_until_gone(client: DockerClient, container: Container) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.containers.get(container.id)
        except NotFound:
            return True
        time.sleep(0.05)
    return False


def wait_for_logs(client: DockerClient, container: Container, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in container.logs().decode():
        assert time.monotonic() < deadline, f"{container.name} never logged {text!r}"
        time.sleep(0.05)


def run(action: str, parameters: dict, sink: MemorySink | None = None):
    """Validate like the API does, then carry the action out."""
    spec = get_action(action)
    sink = sink or MemorySink()
    outcome = spec.runner(spec.validate(parameters), ActionContext(sink=sink))
    sink.close()
    return outcome, sink


def state(client: DockerClient, container: Container) -> dict:
    return client.api.inspect_container(container.id)["State"]


# --- the actions on real containers -------------------------------------------


def test_inspect_writes_the_containers_json(client, container):
    outcome, sink = run("docker.inspect_container", {"container": container.name})

    assert outcome.success, sink.stderr
    assert outcome.backend == "docker-engine"
    attrs = json.loads(sink.stdout)
    assert attrs["Id"] == container.id
    assert attrs["State"]["Running"] is True
    assert outcome.details["status"] == "running"


def test_inspect_accepts_a_container_id(client, container):
    for ident in (container.id, container.short_id):
        outcome, sink = run("docker.inspect_container", {"container": ident})
        assert outcome.success, sink.stderr
        assert json.loads(sink.stdout)["Name"] == f"/{container.name}"


def test_logs_show_both_streams_in_order(client, container):
    outcome, sink = run("docker.container_logs", {"container": container.name})

    assert outcome.success, sink.stderr
    assert sink.stdout.splitlines() == [
        "hello from stdout",
        "hello from stderr",
        "line 1",
        "line 2",
        "line 3",
        "line 4",
        "line 5",
    ]


def test_logs_tail_keeps_only_the_last_lines(client, container):
    outcome, sink = run("docker.container_logs", {"container": container.name, "tail": 2})

    assert outcome.success, sink.stderr
    assert sink.stdout.splitlines() == ["line 4", "line 5"]


def test_stop_stops_the_container(client, container):
    outcome, sink = run("docker.stop_container", {"container": container.name, "timeout": 5})

    assert outcome.success, sink.stderr
    assert state(client, container)["Running"] is False
    assert outcome.details["status"] == "exited"
    assert f"stopped {container.name}" in sink.stdout


def test_stopping_an_auto_remove_container_succeeds(client, start_container):
    container = start_container("trap 'exit 0' TERM; while :; do sleep 0.1; done", auto_remove=True)

    outcome, sink = run("docker.stop_container", {"container": container.name, "timeout": 5})

    assert outcome.success, sink.stderr
    assert outcome.details["status"] in ("removing", "removed")
    assert wait_until_gone(client, container)


def test_logs_tail_of_a_long_log(client, start_container):
    container = start_container("seq 1 20000; echo done; while :; do sleep 1; done")
    wait_for_logs(client, container, "done")

    outcome, sink = run("docker.container_logs", {"container": container.id, "tail": 10000})

    assert outcome.success, sink.stderr
    lines = sink.stdout.splitlines()
    assert len(lines) == 10000
    assert lines[0] == "10002"
    assert lines[-1] == "done"


def test_stop_timeout_kills_a_container_that_ignores_sigterm(client, start_container):
    # A shell as PID 1 without a TERM trap ignores SIGTERM: only the kill ends it.
    container = start_container("while :; do sleep 0.1; done")
    began = time.monotonic()

    outcome, sink = run("docker.stop_container", {"container": container.name, "timeout": 1})

    assert outcome.success, sink.stderr
    assert time.monotonic() - began < 8  # not the default 10 s grace
    assert state(client, container)["ExitCode"] == 137


def test_start_starts_a_stopped_container(client, container):
    container.stop(timeout=5)
    assert state(client, container)["Running"] is False

    outcome, sink = run("docker.start_container", {"container": container.name})

    assert outcome.success, sink.stderr
    assert state(client, container)["Running"] is True
    assert outcome.details["status"] == "running"


def test_restart_starts_the_container_afresh(client, container):
    before = state(client, container)["StartedAt"]

    outcome, sink = run("docker.restart_container", {"container": container.name, "timeout": 5})

    assert outcome.success, sink.stderr
    after = state(client, container)
    assert after["Running"] is True
    assert after["StartedAt"] != before


def test_prune_deletes_unused_networks_and_keeps_used_ones(client, start_container):
    unused = client.networks.create(
        f"airlock-test-{uuid.uuid4().hex[:12]}", labels={LABEL: LABEL_VALUE}
    )
    used = client.networks.create(
        f"airlock-test-{uuid.uuid4().hex[:12]}", labels={LABEL: LABEL_VALUE}
    )
    user = None
    try:
        user = start_container(network_mode=used.name)

        outcome, sink = run("docker.prune_networks", {})

        assert outcome.success, sink.stderr
        assert unused.name in outcome.details["networks_deleted"]
        assert f"deleted network {unused.name}" in sink.stdout
        with pytest.raises(NotFound):
            client.networks.get(unused.id)
        assert client.networks.get(used.id).name == used.name
    finally:
        if user is not None:
            user.remove(force=True)  # a network in use cannot be removed
        for network in (unused, used):
            with contextlib.suppress(NotFound):
                network.remove()


def test_prune_spares_airlocks_own_sandbox_networks(client):
    sandbox_net = client.networks.create(
        f"airlock-test-{uuid.uuid4().hex[:12]}", labels={SANDBOX_LABEL: "1", LABEL: LABEL_VALUE}
    )
    try:
        outcome, sink = run("docker.prune_networks", {})

        assert outcome.success, sink.stderr
        assert sandbox_net.name not in outcome.details["networks_deleted"]
        assert client.networks.get(sandbox_net.id).name == sandbox_net.name
    finally:
        with contextlib.suppress(NotFound):
            sandbox_net.remove()


@pytest.mark.parametrize("action", CONTAINER_ACTIONS)
def test_airlocks_own_sandbox_containers_are_off_limits(client, start_container, action):
    # Owned by this (live) process, so a concurrent reaper pass leaves it alone.
    labels = {SANDBOX_LABEL: "1", OWNER_LABEL: owner_label(), LABEL: LABEL_VALUE}
    container = start_container(labels=labels)
    before = state(client, container)

    outcome, sink = run(action, {"container": container.name})

    assert outcome.exit_code == 1
    assert outcome.error == (
        f"container {container.name} is an Airlock sandbox: docker actions do not touch it"
    )
    assert sink.stdout == ""
    after = state(client, container)
    assert (after["Running"], after["StartedAt"]) == (before["Running"], before["StartedAt"])


# --- clear errors -----------------------------------------------------------


@pytest.mark.parametrize("action", CONTAINER_ACTIONS)
def test_an_unknown_container_is_a_clear_failure(client, action):
    name = f"airlock-missing-{uuid.uuid4().hex[:12]}"

    outcome, sink = run(action, {"container": name})

    assert outcome.exit_code == 1
    assert not outcome.success
    assert outcome.error == f"no such container: {name}"
    assert outcome.error in sink.stderr


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("action", (*CONTAINER_ACTIONS, "docker.prune_networks"))
def test_an_unreachable_engine_is_a_clear_failure(monkeypatch, closed_port, action):
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{closed_port}")
    parameters = {} if action == "docker.prune_networks" else {"container": "web"}

    began = time.monotonic()
    outcome, sink = run(action, parameters)

    assert time.monotonic() - began < 10
    assert outcome.exit_code == 1
    assert outcome.error.startswith(f"Docker engine unreachable at tcp://127.0.0.1:{closed_port}")
    assert "Docker engine unreachable" in sink.stderr


def test_a_cancelled_run_does_not_touch_the_engine(monkeypatch, closed_port):
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{closed_port}")
    spec = get_action("docker.stop_container")
    ctx = ActionContext(sink=MemorySink())
    ctx.cancel.set()

    outcome = spec.runner({"container": "web"}, ctx)

    assert outcome.cancelled
    assert outcome.error is None


# --- validation (no engine needed) --------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "",
        "-rm",
        ".hidden",
        "_x",
        "a;b",
        "a b",
        "a\nb",
        "web\n",
        "../web",
        "/web",
        "$(id)",
        "web`id`",
        "we*b",
        "x" * 129,
        "ünïcode",
    ],
)
@pytest.mark.parametrize("action", CONTAINER_ACTIONS)
def test_invalid_container_names_are_rejected(action, name):
    with pytest.raises(serializers.ValidationError) as excinfo:
        get_action(action).validate({"container": name})
    assert "container" in excinfo.value.detail


@pytest.mark.parametrize("name", ["web", "a", "my_app.1-2", "A" * 128, "0123456789ab", "f" * 64])
def test_valid_container_names_and_ids_are_accepted(name):
    assert get_action("docker.inspect_container").validate({"container": name}) == {
        "container": name
    }


@pytest.mark.parametrize("timeout", [-1, 301, "ten", 1.5, True])
def test_timeout_must_be_whole_seconds_between_0_and_300(timeout):
    with pytest.raises(serializers.ValidationError):
        get_action("docker.stop_container").validate({"container": "web", "timeout": timeout})


@pytest.mark.parametrize("tail", [0, 10001, -5, "all"])
def test_tail_must_be_between_1_and_10000(tail):
    with pytest.raises(serializers.ValidationError):
        get_action("docker.container_logs").validate({"container": "web", "tail": tail})


def test_bounds_are_accepted():
    assert (
        get_action("docker.restart_container").validate({"container": "web", "timeout": 0})[
            "timeout"
        ]
        == 0
    )
    assert (
        get_action("docker.stop_container").validate({"container": "web", "timeout": 300})[
            "timeout"
        ]
        == 300
    )
    assert (
        get_action("docker.container_logs").validate({"container": "web", "tail": 10000})["tail"]
        == 10000
    )


def test_unknown_parameters_are_rejected():
    with pytest.raises(serializers.ValidationError):
        get_action("docker.prune_networks").validate({"force": True})
    with pytest.raises(serializers.ValidationError):
        get_action("docker.inspect_container").validate({"container": "web", "tail": 5})


def test_catalog_entries():
    risks = {
        "docker.inspect_container": 1,
        "docker.container_logs": 1,
        "docker.start_container": 3,
        "docker.restart_container": 4,
        "docker.stop_container": 5,
        "docker.prune_networks": 5,
    }
    for name, risk in risks.items():
        spec = get_action(name)
        assert spec.base_risk == risk
        assert spec.read_only == (name in ("docker.inspect_container", "docker.container_logs"))
        assert not spec.host_bound
        expected = {} if name == "docker.prune_networks" else {"container": "container"}
        assert spec.targets == expected
    assert get_action("docker.stop_container").describe({"container": "web"}) == (
        "docker.stop_container(container=web)"
    )
