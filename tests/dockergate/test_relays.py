"""What the gate lets through for an MCP server with a network list: its relay, and the
server's create in the relay's network, decided without an engine.

Both bodies are the ones the attach program really sends (captured from the docker SDK);
each change that would widen what the relay or the server reaches is refused, naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from dockergate.creates import Policy
from dockergate.rules import PEER_LABEL, Denied, join, plan
from executions.sandboxes.base import ServerSpec
from executions.sandboxes.docker import attach
from executions.sandboxes.docker.servers import server_command
from tests.dockergate.test_rules import SERVER_IMAGE, Captured, capturing, create, loosened

VOLUME = "airlock_egress"
GATE = Policy(
    image="airlock-sandbox:latest", runtimes=frozenset({"runsc"}), max_cpus=4,
    server_images=frozenset({SERVER_IMAGE}), egress_volume=VOLUME,
)  # fmt: skip
PEER = "10.0.0.7"
RELAY_ID = "f" * 64


def sent(config: dict) -> dict:
    client, bodies = capturing()
    with pytest.raises(Captured):
        attach.create(client.api, config)
    return bodies[0]


@pytest.fixture
def creates(settings) -> Iterator[tuple[dict, dict]]:
    """The relay's create and the server's, as the gateway sends them through the gate."""
    folder = tempfile.mkdtemp(prefix="egress-")  # short: a UNIX socket's path is at most 107
    settings.MCP_EGRESS_VOLUME, settings.MCP_EGRESS_DIR = VOLUME, folder
    spec = ServerSpec(name="fetch", argv=(), image=SERVER_IMAGE, network=("example.com:443",))
    server = server_command(spec, None)
    try:
        config = json.loads(server.env["AIRLOCK_SERVER"])
    finally:
        server.cleanup()
    relay = sent(config.pop("relay"))
    config["host_config"]["network_mode"] = "container:relay-1"
    config["hostname"] = None
    yield relay, sent(config)
    shutil.rmtree(folder)


def relay_seen(peer: str = PEER, **changes) -> dict:
    """The engine's inspect of a relay, as the gate reads it."""
    labels = {"airlock.sandbox": "1", "airlock.relay": "1", PEER_LABEL: peer}
    seen = {"Id": RELAY_ID, "Config": {"Labels": labels}, "HostConfig": {"NetworkMode": "none"},
            "State": {"Running": True}}  # fmt: skip
    for path, value in changes.items():
        section, key = path.split("__")
        seen[section][key] = value
    return seen


def test_a_relay_passes_with_the_volume_read_only_and_no_network(creates):
    relay, _ = creates
    planned = plan(create(relay), GATE)
    body = json.loads(planned.body)
    assert body["HostConfig"]["Mounts"] == [
        {"Type": "volume", "Source": VOLUME, "Target": "/egress", "ReadOnly": True}
    ]
    assert body["HostConfig"]["NetworkMode"] == "none" and body["Cmd"][:3] == [
        "python3",
        "-I",
        "-S",
    ]
    assert not planned.joins
    with pytest.raises(Denied, match="DOCKER_GATE_EGRESS_VOLUME names: it is not set"):
        plan(create(relay), Policy(image=GATE.image, runtimes=GATE.runtimes))


RELAY_LOOSENED = {
    "another-volume": (("HostConfig", "Mounts", 0, "Source"), "airlock_postgres", "Mounts"),
    "writable": (("HostConfig", "Mounts", 0, "ReadOnly"), False, "Mounts"),
    "bind": (("HostConfig", "Mounts", 0, "Type"), "bind", "Mounts"),
    "elsewhere": (("HostConfig", "Mounts", 0, "Target"), "/var/lib/airlock", "Mounts"),
    "second-mount": (("HostConfig", "Mounts", 1), {"Type": "volume", "Source": "x", "Target": "/x"}, "Mounts"),
    "binds": (("HostConfig", "Binds"), ["/:/host"], "Binds"),
    "bridge": (("HostConfig", "NetworkMode"), "bridge", "NetworkMode must be none for a relay"),
    "joined": (("HostConfig", "NetworkMode"), "container:postgres", "NetworkMode"),
    "server-image": (("Image",), SERVER_IMAGE, "sandbox image"),
    "shell": (("Cmd",), ["sh", "-c", "id"], "Cmd"),
    "environment": (("Env",), ["A=b"], "Env"),
    "root": (("User",), "0:0", "User"),
}  # fmt: skip


@pytest.mark.parametrize("change", list(RELAY_LOOSENED), ids=list(RELAY_LOOSENED))
def test_a_relay_loosened_in_any_field_is_refused_naming_it(creates, change):
    path, value, field = RELAY_LOOSENED[change]
    relay = creates[0]
    if change == "second-mount":
        relay["HostConfig"]["Mounts"].append(None)
    with pytest.raises(Denied, match=field):
        plan(create(loosened(relay, path, value)), GATE)


def test_a_server_joins_its_relays_network_named_by_its_id(creates):
    _, server = creates
    planned = plan(create(server), GATE)
    assert planned.joins == "relay-1"
    joined = json.loads(join(planned, relay_seen(), PEER).body)
    assert joined["HostConfig"]["NetworkMode"] == f"container:{RELAY_ID}"
    assert "HTTPS_PROXY=http://127.0.0.1:3128" in joined["Env"]
    assert not joined.get("Hostname")  # the relay's, with its network


@pytest.mark.parametrize(
    "seen, why",
    [
        (None, "does not exist"),
        (relay_seen(Config__Labels={"airlock.sandbox": "1", PEER_LABEL: PEER}), "is not a relay"),
        (relay_seen(Config__Labels={"com.docker.compose.service": "postgres"}), "is not a relay"),
        (relay_seen(peer="10.0.0.8"), "made by another client"),
        (relay_seen(HostConfig__NetworkMode="bridge"), "has a network of the engine's"),
        (relay_seen(State__Running=False), "is not running"),
    ],
    ids=["missing", "a-sandbox", "postgres", "another-clients", "bridged", "stopped"],
)
def test_a_server_may_join_only_a_running_relay_of_its_own_client(creates, seen, why):
    planned = plan(create(creates[1]), GATE)
    with pytest.raises(Denied, match=why):
        join(planned, seen, PEER)


def test_a_sandbox_or_a_relay_may_not_join_anything(creates):
    relay, server = creates
    unlabelled = loosened(server, ("Labels",), {"airlock.sandbox": "1"})
    unlabelled["Image"], unlabelled["Cmd"] = GATE.image, ["python3", "-I", "-S", "run.py"]
    with pytest.raises(Denied, match="NetworkMode"):
        plan(create(unlabelled), GATE)
    with pytest.raises(Denied, match="NetworkMode"):
        plan(create(loosened(relay, ("HostConfig", "NetworkMode"), "container:relay-1")), GATE)


def test_the_proxy_folders_of_a_dead_process_go_at_the_next_start(settings):
    """Named by host and pid: a web process killed outright leaves its folder on the volume
    (or in /tmp), and the next server started on that host removes it, and only it."""
    folder = tempfile.mkdtemp(prefix="egress-")
    settings.MCP_EGRESS_VOLUME, settings.MCP_EGRESS_DIR = VOLUME, folder
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    host = socket.gethostname()
    names = {
        "dead": f"airlock-egress-{host}@{gone.pid}-a1",
        "live": f"airlock-egress-{host}@{os.getpid()}-a2",
        "another host's": f"airlock-egress-{host}-2@{gone.pid}-a3",
        "not a proxy's": f"airlock-sandbox-{gone.pid}-a4",
    }
    for name in names.values():
        os.mkdir(os.path.join(folder, name))
    spec = ServerSpec(name="fetch", argv=(), image=SERVER_IMAGE, network=("example.com:443",))
    server = server_command(spec, None)
    try:
        left = set(os.listdir(folder))
    finally:
        server.cleanup()
        shutil.rmtree(folder)
    assert names["dead"] not in left
    assert {names["live"], names["another host's"], names["not a proxy's"]} <= left
    assert len(left) == 4  # and the new server's own
