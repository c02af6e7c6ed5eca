"""The live state of a proposal's target (executions.targets), read from the real thing.

Containers run on the test engine from a locally built image (no registry here:
the static-busybox image tests/executions/test_docker_actions.py imports, or the
sandbox image); without an engine the Docker tests skip, and under ``CI=true``
they fail. An engine that is away is a closed socket, or one that takes the
connection and never answers. systemd does not run here, so service states come
from a real stand-in executable named by ``HOST_ACTIONS_SYSTEMCTL`` that records
its argv, as in tests/executions/test_host_actions.py.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse
from docker.client import DockerClient
from docker.errors import APIError, ImageNotFound, NotFound

from approvals.core.services import submit
from dockergate.targets import Targets
from executions import targets
from tests.executions.conftest import ACTIVE
from tests.executions.test_docker_actions import require_engine
from tests.support import require, wait_for

IMAGES = ("airlock-test-busybox:latest", "airlock-sandbox:latest")
LABEL = "airlock.test"
IDLE = "trap 'exit 0' TERM; while :; do sleep 0.1; done"
# Bounds that show a read gave up instead of waiting out a hung engine or systemctl (30 s
# and more): far above the second it waits, so that a loaded machine does not fail them
# (how fast it is, a benchmark measures; these check the mechanism).
GAVE_UP_SECONDS = 10
PAGE_SECONDS = GAVE_UP_SECONDS


def facts(state) -> dict[str, object]:
    return {fact.label: fact.when or fact.text for fact in state.facts}


# --- Docker -------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[DockerClient]:
    client = require_engine()
    yield client
    client.close()


@pytest.fixture(scope="module")
def image(engine: DockerClient) -> str:
    for name in IMAGES:
        with contextlib.suppress(ImageNotFound):
            engine.images.get(name)
            return name
    require(False, f"no local image to run: build one of {', '.join(IMAGES)}")


@pytest.fixture
def start(engine: DockerClient, image: str) -> Iterator:
    started = []

    def run(script: str = IDLE, **kwargs):
        container = engine.containers.run(
            image,
            ["sh", "-c", script],
            entrypoint=[],
            name=f"airlock-test-{uuid.uuid4().hex[:12]}",
            labels=kwargs.pop("labels", {LABEL: "targets"}),
            network_mode="none",
            detach=True,
            **kwargs,
        )
        started.append(container)
        return container

    yield run
    for container in started:
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)


def engine_says(engine: DockerClient, container) -> dict:
    return engine.api.inspect_container(container.id)["State"]


def read_container(name: str, seconds: float = GAVE_UP_SECONDS):
    """The state of container ``name``; by default with time to spare (a loaded machine's
    engine may take more than the page's second: the tests that mean it pass it)."""
    return targets.read("docker.restart_container", {"container": name}, seconds)


@pytest.mark.docker
def test_a_running_container_reads_as_running_with_its_image_and_start(engine, start, image):
    container = start()
    wait_for(lambda: engine_says(engine, container)["Running"])

    state = read_container(container.name)

    assert (state.kind, state.name, state.status, state.why) == (
        "container",
        container.name,
        "running",
        "",
    )
    shown = facts(state)
    assert shown["Image"].startswith(image)
    assert abs(shown["Started"].timestamp() - time.time()) < 120
    assert shown["Restarts"] == "0 (restart policy: no)"
    assert shown["Health"] == "no health check"
    assert "Ended" not in shown
    assert 0 <= state.read_ms < GAVE_UP_SECONDS * 1000


@pytest.mark.docker
def test_a_health_check_shows_as_the_engine_reports_it(engine, start):
    check = {"test": ["CMD", "true"], "interval": 100_000_000, "start_period": 0}
    container = start(healthcheck=check)
    wait_for(lambda: engine_says(engine, container).get("Health", {}).get("Status") == "healthy")

    assert facts(read_container(container.name))["Health"] == "healthy"


@pytest.mark.docker
def test_a_stopped_container_reads_as_exited_with_its_exit_code(engine, start):
    container = start("exit 3")
    wait_for(lambda: engine_says(engine, container)["Status"] == "exited")

    state = read_container(container.id[:12])

    assert (state.status, state.name) == ("exited", container.name)
    assert facts(state)["Ended"] is not None
    ended = next(fact for fact in state.facts if fact.label == "Ended")
    assert ended.text == "exit code 3" and ended.when is not None


@pytest.mark.docker
def test_a_container_that_keeps_failing_reads_as_restarting_with_its_count(engine, start):
    container = start("exit 1", restart_policy={"Name": "always"})
    # The engine waits longer before each restart: after a few, it is mostly "restarting".
    wait_for(
        lambda: (
            engine_says(engine, container)["Status"] == "restarting"
            and engine.api.inspect_container(container.id)["RestartCount"] >= 3
        ),
        timeout=30,
    )

    state = wait_for(lambda: (s := read_container(container.name)).status == "restarting" and s)

    count, policy = facts(state)["Restarts"].split(" ", 1)
    assert int(count) >= 3 and policy == "(restart policy: always)"


@pytest.mark.docker
def test_a_container_that_is_not_there_reads_as_not_found(engine):
    state = read_container(f"airlock-test-missing-{uuid.uuid4().hex[:8]}")
    assert (state.status, state.known) == ("not found", True)


@pytest.mark.docker
def test_a_container_the_actions_may_not_touch_is_not_described(engine, start, settings):
    settings.DOCKER_ACTION_CONTAINERS = Targets.parse("label:airlock.actions")
    outside = start()
    inside = start(labels={"airlock.actions": ""})

    refused = read_container(outside.name)
    assert (refused.status, refused.facts) == ("unknown", ())
    assert "not a container Airlock may act on" in refused.why
    assert read_container(inside.name).status == "running"


@pytest.mark.docker
def test_an_airlock_sandbox_is_never_described(engine, start):
    sandbox = start(labels={"airlock.sandbox": "1"})
    state = read_container(sandbox.name)
    assert state.status == "unknown" and "sandbox" in state.why


def test_an_engine_that_is_away_reads_as_unknown_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")  # nothing listens

    began = time.monotonic()
    state = read_container("web-1")

    assert time.monotonic() - began < GAVE_UP_SECONDS
    assert (state.status, state.name, state.facts) == ("unknown", "web-1", ())
    assert "does not answer" in state.why


@pytest.fixture
def silent_engine(monkeypatch) -> Iterator[None]:
    """DOCKER_HOST at a socket that takes connections and never answers (never accepts)."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as server:
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.getsockname()[1]}")
        yield


def test_an_engine_that_never_answers_reads_as_unknown_within_the_second(silent_engine):
    began = time.monotonic()
    state = read_container("web-1", targets.READ_SECONDS)
    took = time.monotonic() - began

    assert (state.status, state.why) == ("unknown", "no answer within 1 s")
    assert 0.9 <= took < GAVE_UP_SECONDS, took


def test_actions_without_a_live_target_read_nothing():
    assert targets.read("script.execute", {"language": "python", "code": "pass"}) is None
    assert targets.read("tool.call", {"tool": "github.merge", "arguments": {}}) is None
    assert targets.read("docker.prune_networks", {}) is None
    assert targets.read("no.such_action", {"container": "web-1"}) is None
    assert targets.read("docker.stop_container", "web-1") is None


def test_a_container_name_the_actions_would_refuse_is_not_looked_up(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")
    state = read_container("../containers/x")
    assert (state.status, state.why) == ("unknown", "not a container name")


# --- the page -----------------------------------------------------------------


def page(reviewer, proposal_id: int):
    client = Client()
    client.force_login(reviewer)
    began = time.monotonic()
    response = client.get(reverse("console:proposal", args=[proposal_id]))
    return response, time.monotonic() - began


def proposed(agent, action: str, parameters: dict):
    return submit(agent, {"action": action, "parameters": parameters, "reason": "r"}).proposal


@pytest.mark.docker
@pytest.mark.django_db
def test_the_proposal_page_shows_the_containers_live_state(engine, start, agent, reviewer):
    container = start()
    wait_for(lambda: engine_says(engine, container)["Running"])
    proposal = proposed(agent, "docker.restart_container", {"container": container.name})

    response, _ = page(reviewer, proposal.pk)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="target-state"' in html
    assert f'id="target-name">{container.name}</code>' in html
    assert 'class="status status-running" id="target-status">running</span>' in html
    assert "<dt>Restarts</dt><dd>0 (restart policy: no)</dd>" in html
    assert "<dt>Health</dt><dd>no health check</dd>" in html

    container.stop(timeout=1)
    html = page(reviewer, proposal.pk)[0].content.decode()
    assert 'id="target-status">exited</span>' in html


@pytest.mark.django_db
def test_the_page_renders_fast_with_unknown_when_the_engine_never_answers(
    agent, reviewer, silent_engine
):
    proposal = proposed(agent, "docker.stop_container", {"container": "web-1"})
    page(reviewer, proposal.pk)  # templates compiled, sessions warm: what is left is the read

    response, took = page(reviewer, proposal.pk)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="target-status">unknown</span>' in html
    assert 'id="target-why">no answer within 1 s</span>' in html
    assert 'id="proposal-panel"' in html  # the rest of the page is there
    assert took < PAGE_SECONDS, took


@pytest.mark.django_db
def test_the_page_says_unknown_and_why_when_the_engine_is_away(
    agent, reviewer, monkeypatch, tmp_path
):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")
    proposal = proposed(agent, "docker.inspect_container", {"container": "web-1"})

    response, took = page(reviewer, proposal.pk)

    html = response.content.decode()
    assert 'id="target-status">unknown</span>' in html
    assert "the Docker engine does not answer" in html
    assert took < PAGE_SECONDS, took


@pytest.mark.django_db
def test_a_script_proposal_has_no_live_state(agent, reviewer):
    proposal = proposed(agent, "script.execute", {"language": "python", "code": "print(1)\n"})
    html = page(reviewer, proposal.pk)[0].content.decode()
    assert 'id="target-state"' not in html


@pytest.mark.django_db
def test_a_scripts_risk_reasons_mark_the_lines_they_point_at(agent, reviewer):
    code = "echo cleaning\ncd /srv/cache\nrm -rf /etc/nginx\necho done\n"
    proposal = proposed(agent, "script.execute", {"language": "bash", "code": code})
    proposal.refresh_from_db()
    assert proposal.risk_lines  # the analysers located what they found

    html = page(reviewer, proposal.pk)[0].content.decode()

    marked = {n for entry in proposal.risk_lines for n in entry["lines"]}
    for n in marked:
        assert f'<a id="code-line-{n}" name="code-line-{n}"></a><span class="hll">' in html
        assert f'<a href="#code-line-{n}">line {n}</a>' in html
    for n in {1, 2, 3, 4} - marked:
        assert f'<a id="code-line-{n}" name="code-line-{n}"></a><span class="hll">' not in html
    assert 'id="risk-lines"' in html


@pytest.mark.django_db
def test_only_lines_the_code_has_are_marked(agent, reviewer):
    code = "import os\nos.remove('x')\n"
    proposal = proposed(agent, "script.execute", {"language": "python", "code": code})
    located = [
        {"reason": "removes a file", "lines": [2, 9, True, "1"]},
        {"reason": "nowhere", "lines": [0, 40]},
    ]
    type(proposal).objects.filter(pk=proposal.pk).update(risk_lines=located)

    html = page(reviewer, proposal.pk)[0].content.decode()

    listed = re.search(r'<ul class="risk-lines" id="risk-lines"[^>]*>(.*?)</ul>', html, re.S)
    assert re.sub(r"<[^>]+>|\s+", " ", listed.group(1)).split() == [
        "line",
        "2",
        ":",
        "removes",
        "a",
        "file",
    ]
    assert html.count('<span class="hll">') == 1


@pytest.mark.django_db
def test_without_located_reasons_nothing_is_marked(agent, reviewer):
    proposal = proposed(agent, "script.execute", {"language": "python", "code": "print(1)\n"})
    type(proposal).objects.filter(pk=proposal.pk).update(risk_lines=None)
    html = page(reviewer, proposal.pk)[0].content.decode()
    assert 'id="risk-lines"' not in html and 'class="hll"' not in html


# --- systemd services ---------------------------------------------------------


def read_service(service: str, host: str):
    return targets.read("host.restart_service", {"service_name": service, "host": host})


def test_a_service_on_this_host_reads_with_systemctl_show_only(systemctl, settings):
    calls = systemctl(ACTIVE)

    state = read_service("nginx.service", settings.WORKER_HOSTNAME)

    [argv] = calls()
    assert argv[1:] == [
        "show",
        "--property=LoadState,ActiveState,SubState,UnitFileState,ActiveEnterTimestamp,"
        "NRestarts,MainPID,Result,Description",
        "nginx.service",
    ]
    assert (state.kind, state.name, state.status) == (
        "service",
        f"nginx.service on {settings.WORKER_HOSTNAME}",
        "active",
    )
    assert facts(state) == {
        "State": "active (running)",
        "Since": "Thu 2026-11-26 09:12:44 UTC",
        "Restarts": "2",
        "Main PID": "4242",
        "Enabled": "enabled",
        "Description": "A high performance web server = and a reverse proxy",
    }


def test_a_failed_service_and_a_missing_one(systemctl, settings):
    systemctl(
        "LoadState=loaded\nActiveState=failed\nSubState=failed\nResult=exit-code\nMainPID=0\n"
    )
    state = read_service("redis", settings.WORKER_HOSTNAME)
    assert state.status == "failed"
    assert facts(state) == {"State": "failed (failed)", "Last result": "exit-code"}

    systemctl("LoadState=not-found\nActiveState=inactive\n")
    assert read_service("nope", settings.WORKER_HOSTNAME).status == "not found"


def test_a_systemctl_that_fails_says_why(systemctl, settings):
    systemctl(code=1, stderr="System has not been booted with systemd as init system (PID 1).\n")
    state = read_service("nginx", settings.WORKER_HOSTNAME)
    assert state.status == "unknown"
    assert state.why == (
        "systemctl show failed (exit code 1): "
        "System has not been booted with systemd as init system (PID 1)."
    )


def test_a_systemctl_that_hangs_is_unknown_within_the_second(systemctl, settings):
    systemctl(ACTIVE, sleep=30)
    began = time.monotonic()
    state = read_service("nginx", settings.WORKER_HOSTNAME)
    assert time.monotonic() - began < GAVE_UP_SECONDS
    assert (state.status, state.why) == ("unknown", "no answer within 1 s")


def test_a_service_on_another_host_without_a_shared_broker_is_unknown_and_says_why(
    systemctl, settings
):
    settings.REDIS_URL = None  # the embedded deployment: one host, no broker between hosts
    calls = systemctl(ACTIVE)
    state = read_service("nginx", "db-7")
    assert state.status == "unknown"
    assert state.why == (
        "only db-7's worker reads its services, and this deployment has no broker between hosts"
    )
    assert calls() == []  # nothing ran here


@pytest.mark.django_db
def test_the_proposal_page_shows_the_services_state(systemctl, settings, agent, reviewer):
    systemctl(ACTIVE)
    proposal = proposed(
        agent, "host.stop_service", {"service_name": "nginx", "host": settings.WORKER_HOSTNAME}
    )
    html = page(reviewer, proposal.pk)[0].content.decode()
    assert 'id="target-status">active</span>' in html
    assert "<dt>State</dt><dd>active (running)</dd>" in html


@pytest.mark.parametrize(
    ("service", "host"), [("--all", "db-7"), ("nginx; reboot", "db-7"), ("nginx", "db 7;x")]
)
def test_a_name_systemctl_would_not_take_as_a_unit_asks_no_host(
    monkeypatch, settings, service, host
):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # hosts that share a broker: they could be asked
    asked = []
    monkeypatch.setattr("executions.targets.remote.enqueue", lambda *a, **kw: asked.append(a))
    state = read_service(service, host)
    assert (state.status, state.why) == ("unknown", "not a unit name on a host name")
    assert asked == []
    if service != "nginx":  # on this host, the same name is not run either
        assert read_service(service, settings.WORKER_HOSTNAME).why == "not a unit name"
