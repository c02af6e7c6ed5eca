"""A stdio upstream run from an image: a container on the engine, or through the Docker gate.

The suite's upstream (``tests.gateway.upstream``, on the official SDK) is built
into an image (``images.upstream_image``) and listed as ``box`` with nothing but
its image and an environment (named ``box<pid>``). Two deployments, each a real ``serve``: the gvisor
backend on the engine itself (the server runs under runsc), and the docker
backend whose engine is reached through a real gate (``python -m dockergate``)
that lets MCP servers run only from its list of images, as the scale deployment
does. In each, the server's tools try what a hostile server would, and its
legitimate tools still answer through the gateway.

A second upstream, ``net<pid>``, is the same image with a network list that
names one HTTP server on this host: through the gate it runs in its relay's
network, the proxy folders on a volume as in the scale deployment; under
gVisor the list is refused with a sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.dockergate.conftest import Gate, running_gate
from tests.executions.attacks import assert_contained
from tests.gateway.conftest import attack_code
from tests.gateway.images import upstream_image
from tests.mcp.conftest import Served, connect, text_of
from tests.serving import start_server
from tests.support import require, wait_for

RESOLVED = "box-value-51c2"  # what ${BOX_VALUE} names in Airlock's environment
# The upstream's name labels its containers: one of this run's own, whatever else the engine
# holds (another run's, a compose stack's).
BOX, OTHER, NET = f"box{os.getpid()}", f"other{os.getpid()}", f"net{os.getpid()}"
SANDBOX_IMAGE = "airlock-sandbox:latest"


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


def server_containers(name: str = BOX) -> list[dict]:
    """The engine's containers of the ``box`` upstream (or ``name``), inspected."""
    ids = docker("ps", "-aq", "--filter", f"label=airlock.server={name}").split()
    # One may be removed between the two reads: inspect says so and gives the others.
    found = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True)
    return json.loads(found.stdout or "[]") if ids else []


@dataclass
class Boxed:
    served: Served
    backend: str
    gate: Gate | None
    token: str
    web_port: int  # an HTTP server on this host: what ``net``'s network list names

    def call(self, tool: str, upstream: str = BOX, **arguments) -> str:
        async def calling():
            async with connect(self.served.url, self.token) as client:
                return await client.call_tool(f"{upstream}__{tool}", arguments)

        result = asyncio.run(calling())
        assert result.is_error is False, text_of(result)
        return text_of(result)

    def tools(self) -> set[str]:
        async def listing():
            async with connect(self.served.url, self.token) as client:
                return {tool.name for tool in (await client.list_tools()).tools}

        return asyncio.run(listing())


@pytest.fixture(scope="module")
def image() -> str:
    require(shutil.which("docker") is not None and os.path.exists("/var/run/docker.sock"),
            "no Docker engine here")  # fmt: skip
    present = subprocess.run(["docker", "image", "inspect", SANDBOX_IMAGE], capture_output=True)
    require(present.returncode == 0, f"no {SANDBOX_IMAGE}: build it with docker/sandbox/build")
    return upstream_image(SANDBOX_IMAGE)


def _upstreams(image: str, web_port: int) -> str:
    box = {"image": image, "env": {"FROM_AIRLOCK": "${BOX_VALUE}"}, "timeout_seconds": 20}
    other = {"image": SANDBOX_IMAGE, "command": ["python3", "-c", "pass"]}
    net = {"image": image, "network": [f"127.0.0.1:{web_port}"], "timeout_seconds": 20}
    return json.dumps({"upstreams": {BOX: box, OTHER: other, NET: net}})


@contextlib.contextmanager
def web_server() -> Iterator[int]:
    """An HTTP server on this host's loopback; its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def egress_volume(folder: Path) -> Iterator[str]:
    """A named volume whose content is ``folder`` (as the web container's mount of the
    scale deployment's volume is): the relays mount it, the proxies make folders in it."""
    name = f"airlock-egress-test{os.getpid()}"
    docker("volume", "create", "--driver", "local", "--opt", "type=none", "--opt", "o=bind",
           "--opt", f"device={folder}", name)  # fmt: skip
    try:
        yield name
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", name], capture_output=True)


@pytest.fixture(scope="module", params=["gvisor", "docker-through-the-gate"])
def boxed(request, image: str, tmp_path_factory) -> Iterator[Boxed]:
    backend = request.param.split("-")[0]
    if backend == "gvisor":
        runtimes = docker("info", "--format", "{{json .Runtimes}}")
        require("runsc" in json.loads(runtimes), "runsc is not registered with dockerd")
    root = Path(tempfile.mkdtemp(prefix="airlock-boxed-"))
    with contextlib.ExitStack() as stack:
        env = {"BOX_VALUE": RESOLVED, "STEP_UP_MIN_RISK": "11"}
        web_port = stack.enter_context(web_server())
        gate = None
        if backend == "docker":  # as the scale deployment has it: only the gate holds the engine
            (root / "egress").mkdir()
            volume = stack.enter_context(egress_volume(root / "egress"))
            gate = stack.enter_context(
                running_gate(
                    tmp_path_factory.mktemp("gate") / "gate.log", "/var/run/docker.sock",
                    DOCKER_GATE_SERVER_IMAGES=image, DOCKER_GATE_RUNTIMES="runsc",
                    DOCKER_ACTION_CONTAINERS="", DOCKER_GATE_EGRESS_VOLUME=volume,
                )
            )  # fmt: skip
            env |= {"DOCKER_HOST": gate.url, "MCP_EGRESS_VOLUME": volume}
            env["MCP_EGRESS_DIR"] = str(root / "egress")
        server = start_server(root / "data", backend=backend, extra_env=env)
        try:
            served = Served(server, root / "data", env={**env, "SANDBOX_BACKEND": backend})
            (root / "upstreams.yaml").write_text(_upstreams(image, web_port))
            served.manage("upstreams", "apply", str(root / "upstreams.yaml"))
            served.manage(
                "shell", "-c",
                "from approvals.policy.rules import DEFAULT_POLICY, update_policy; "
                "update_policy({**DEFAULT_POLICY, 'allow': [{'kind': 'tool', 'pattern': "
                f"'{BOX}.*', 'note': 'test'}}, {{'kind': 'tool', 'pattern': '{NET}.*', 'note': 'test'}}]}}, "
                "None, 'test', actor='test')",
            )  # fmt: skip
            token = served.new_agent("boxer", f"tool.call:{BOX}.*", f"tool.call:{NET}.*")
            yield Boxed(served, backend, gate, token, web_port)
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)
    wait_for(lambda: not server_containers() + server_containers(NET), 20)  # ended with Airlock
    assert server_containers() + server_containers(NET) == []


def test_its_tools_answer_from_a_hardened_container_of_its_image(boxed: Boxed):
    assert {f"{BOX}__{tool}" for tool in ("echo", "add", "probe", "scratch")} <= boxed.tools()
    assert boxed.call("echo", text="hi") == "echo: hi"
    assert boxed.call("getenv", name="FROM_AIRLOCK") == RESOLVED  # its own env, resolved
    assert boxed.call("scratch", text="kept") == "/work: kept"  # a scratch dir of its own
    containers = server_containers()  # one per web process that opened it
    assert containers
    image = boxed.served.manage("upstreams", "export").split("image: ")[1].split()[0]
    for container in containers:
        host = container["HostConfig"]
        assert container["Config"]["Image"] == image
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
        assert not host["Binds"] and not container["Mounts"] and not host["Privileged"]
        assert container["Config"]["User"] == "10001:10001"
        assert host["Runtime"] == ("runsc" if boxed.backend == "gvisor" else "runc")
        if boxed.gate is not None:  # created through the gate, which labels its creator
            assert "airlock.gate.peer" in container["Config"]["Labels"]


def test_it_reaches_nothing_of_airlock_nor_the_network(boxed: Boxed):
    data = boxed.served.data
    port = urlsplit(boxed.served.server.base).port
    assert (data / "secret_key").exists()
    refused = {
        "the secret key": boxed.call("probe", path=str(data / "secret_key")),
        "the database": boxed.call("probe", path=str(data / "airlock.sqlite3")),
        "the data dir": boxed.call("probe", folder=str(data)),
        "the host's passwords": boxed.call("probe", path="/etc/shadow"),
        "Airlock's port": boxed.call("probe", host="127.0.0.1", port=port),
        "Redis": boxed.call("probe", host="127.0.0.1", port=6379),
        "the engine's bridge": boxed.call("probe", host="172.17.0.1", port=port),
        "an outside address": boxed.call("probe", host="1.1.1.1", port=53),
    }
    assert {what: said for what, said in refused.items() if not said.startswith("refused")} == {}
    assert boxed.call("getenv", name="SECRET_KEY") == "<unset>"
    assert boxed.call("getenv", name="DOCKER_HOST") == "<unset>"
    assert boxed.call("probe", path="/var/run/docker.sock").startswith("refused")


def test_the_attack_code_run_as_its_tool_is_contained_as_a_scripts_is(boxed: Boxed):
    served = boxed.served
    code = attack_code(served.data, urlsplit(served.server.base).port, served.server.process.pid)
    said = boxed.call("attack", code=code)
    assert_contained(said, (served.data / "secret_key").read_text().strip())
    assert not (served.data / "planted").exists()


def test_a_crashed_server_is_started_again_in_a_new_container(boxed: Boxed):
    boxed.call("echo", text="before")
    before = {container["Id"] for container in server_containers()}

    async def crashing():
        async with connect(boxed.served.url, boxed.token) as client:
            return await client.call_tool(f"{BOX}__crash", {})

    crashed = asyncio.run(crashing())
    assert crashed.is_error is True
    assert boxed.call("echo", text="after") == "echo: after"

    def ids() -> set[str]:
        return {container["Id"] for container in server_containers()}

    wait_for(lambda: before - ids(), 20)  # the crashed one is gone, removed
    # The process whose server crashed opens a new one at its next call (whichever of the
    # web processes a call reaches: call until one has).
    wait_for(lambda: boxed.call("echo", text="again") and ids() - before, 30)


def test_an_image_that_will_not_run_is_a_clear_error(boxed: Boxed):
    with pytest.raises(subprocess.CalledProcessError) as failed:
        boxed.served.manage("upstreams", "check", OTHER)
    said = failed.value.stdout
    assert said.startswith(f"{OTHER}: upstream {OTHER} is unreachable: "), said
    if boxed.gate is not None:  # the gate's list holds the test image only
        assert f"Image '{SANDBOX_IMAGE}' is not one an MCP server may run from" in said, said
    left = ["ps", "-aq", "--filter", f"label=airlock.server={OTHER}"]
    wait_for(lambda: not docker(*left).strip(), 20)  # and it left no container


def test_a_network_list_is_its_servers_only_way_out(boxed: Boxed):
    if boxed.backend == "gvisor":  # runsc runs with --network=none: no relay can reach it
        with pytest.raises(subprocess.CalledProcessError) as failed:
            boxed.served.manage("upstreams", "check", NET)
        assert "under gVisor a server's container has no network" in failed.value.stdout
        assert server_containers(NET) == []
        return
    port = urlsplit(boxed.served.server.base).port
    assert boxed.call("fetch", NET, host="127.0.0.1", port=boxed.web_port) == "answered 501"
    said = {
        "Airlock's port, through the proxy": boxed.call("fetch", NET, host="127.0.0.1", port=port),
        "the listed port, around the proxy": boxed.call(
            "probe", NET, host="127.0.0.1", port=boxed.web_port
        ),
        "the engine's bridge": boxed.call("probe", NET, host="172.17.0.1", port=boxed.web_port),
        "an outside address": boxed.call("probe", NET, host="1.1.1.1", port=53),
        "the secret key": boxed.call("probe", NET, path=str(boxed.served.data / "secret_key")),
        "the proxies' folder": boxed.call("probe", NET, folder="/egress"),
    }
    assert said["Airlock's port, through the proxy"].endswith("403 Forbidden"), said
    assert {what: told for what, told in said.items() if not told.startswith("refused")} == {}
    assert boxed.call("getenv", NET, name="HTTPS_PROXY") == "http://127.0.0.1:3128"
    containers = server_containers(NET)  # per web process: a relay, and a server in its network
    relays = {c["Id"]: c for c in containers if c["Config"]["Labels"].get("airlock.relay")}
    servers = [c for c in containers if c["Id"] not in relays]
    assert relays and servers
    for server in servers:
        joined = server["HostConfig"]["NetworkMode"].removeprefix("container:")
        assert joined in relays, server["HostConfig"]["NetworkMode"]
        assert not server["Mounts"] and server["Config"]["Image"] != SANDBOX_IMAGE
    for relay in relays.values():
        assert relay["Config"]["Image"] == SANDBOX_IMAGE
        assert relay["HostConfig"]["NetworkMode"] == "none"
        assert [(m["Type"], m["Destination"], m["RW"]) for m in relay["Mounts"]] == [
            ("volume", "/egress", False)
        ]
        assert (
            relay["HostConfig"]["CapDrop"] == ["ALL"] and relay["Config"]["User"] == "10001:10001"
        )
        assert "airlock.gate.peer" in relay["Config"]["Labels"]


def test_a_removed_upstreams_server_ends_with_its_container(boxed: Boxed):
    boxed.call("echo", text="here")
    assert server_containers()
    boxed.served.manage("shell", "-c", "from approvals.gateway import config; "
                        "config.apply('upstreams: {}', 'test')")  # fmt: skip
    # Every web process ends its server within seconds, whether a call reaches it or not.
    wait_for(lambda: not server_containers(), 30)
    assert f"{BOX}__echo" not in boxed.tools()
