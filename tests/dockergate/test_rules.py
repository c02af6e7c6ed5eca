"""What the gate lets through, decided without an engine: routes, creates, targets.

The creates start from the body the docker backend really sends (captured from
the docker SDK on its way out) and change one field each: every change that
would loosen the sandbox is refused, naming the field.
"""

from __future__ import annotations

import ast
import copy
import json
import sys
from pathlib import Path

import docker
import pytest

from dockergate.creates import Policy
from dockergate.rules import Denied, Request, judge, plan
from dockergate.targets import SANDBOX_LABEL, BadRules, Targets
from executions.sandboxes import reaper
from executions.sandboxes.base import Limits, SandboxError, ServerSpec
from executions.sandboxes.docker import DockerSandbox, attach
from executions.sandboxes.docker.pool import Shape
from executions.sandboxes.docker.servers import server_command

POLICY = Policy(image="airlock-sandbox:latest", runtimes=frozenset({"runsc"}), max_cpus=4)
TARGETS = Targets.parse("label:airlock.actions, name:web-*")


class Captured(Exception):
    pass


def capturing() -> tuple[docker.DockerClient, list[dict]]:
    """A client whose JSON posts (a create's body) are kept, and go nowhere (``Captured``)."""
    client = docker.DockerClient(base_url="tcp://127.0.0.1:9", version="1.41")
    sent: list[dict] = []

    def capture(url, data=None, **kwargs):
        sent.append(json.loads(json.dumps(data)))
        raise Captured

    client.api._post_json = capture
    return client, sent


def sandbox_create(runtime: str | None = None, network: bool = False) -> dict:
    """The create body DockerSandbox sends, taken from the SDK before it leaves."""
    client, sent = capturing()
    client.api.containers = lambda **kwargs: []  # the reaper at start-up: nothing to reap
    sandbox = DockerSandbox(client=client, runtime=runtime, spare=False)
    with pytest.raises(SandboxError):
        sandbox._create_attached(["python3", "-I", "-S", "/opt/airlock/runner.py"],
                                 Shape.of(Limits(network=network)), "sandbox")  # fmt: skip
    return sent[0]


SERVER_IMAGE = "mcp/fetch:1.2"
SERVERS = Policy(
    image="airlock-sandbox:latest", runtimes=frozenset({"runsc"}), max_cpus=4,
    server_images=frozenset({SERVER_IMAGE}),
)  # fmt: skip


def server_create(runtime: str | None = None) -> dict:
    """The create body the gateway's attach program sends for an upstream run from an image."""
    spec = ServerSpec(name="fetch", argv=(), env=(("TOKEN", "t"),), image=SERVER_IMAGE)
    config = json.loads(server_command(spec, runtime).env["AIRLOCK_SERVER"])
    client, sent = capturing()
    with pytest.raises(Captured):
        attach.create(client.api, config)
    return sent[0]


def create(body: dict) -> Request:
    return Request("POST", "/v1.41/containers/create", json.dumps(body).encode())


@pytest.mark.parametrize(
    "runtime, network",
    [(None, False), ("runsc", False), (None, True)],
    ids=["runc", "runsc", "net"],
)
def test_the_backends_own_creates_pass_and_are_sent_on_as_checked(runtime, network):
    body = sandbox_create(runtime, network)
    planned = plan(create(body), POLICY)
    sent = json.loads(planned.body)
    assert sent["HostConfig"] == body["HostConfig"]
    assert sent["Image"] == "airlock-sandbox:latest" and sent["Labels"]["airlock.sandbox"] == "1"


LOOSENED = {
    "privileged": (("HostConfig", "Privileged"), True, "Privileged"),
    "bind-root": (("HostConfig", "Binds"), ["/:/host"], "Binds"),
    "docker-socket": (("HostConfig", "Binds"), ["/var/run/docker.sock:/s"], "Binds"),
    "mount": (("HostConfig", "Mounts"), [{"Type": "bind", "Source": "/etc", "Target": "/e"}], "Mounts"),
    "device": (("HostConfig", "Devices"), [{"PathOnHost": "/dev/kmsg"}], "Devices"),
    "cap-add": (("HostConfig", "CapAdd"), ["SYS_ADMIN"], "CapAdd"),
    "cap-keep": (("HostConfig", "CapDrop"), ["NET_RAW"], "CapDrop"),
    "host-network": (("HostConfig", "NetworkMode"), "host", "NetworkMode"),
    "stack-network": (("HostConfig", "NetworkMode"), "airlock_default", "NetworkMode"),
    "container-network": (("HostConfig", "NetworkMode"), "container:postgres", "NetworkMode"),
    "host-pid": (("HostConfig", "PidMode"), "host", "PidMode"),
    "host-ipc": (("HostConfig", "IpcMode"), "host", "IpcMode"),
    "userns": (("HostConfig", "UsernsMode"), "host", "UsernsMode"),
    "seccomp-off": (("HostConfig", "SecurityOpt"), ["no-new-privileges", "seccomp=unconfined"], "SecurityOpt"),
    "apparmor-off": (("HostConfig", "SecurityOpt"), ["apparmor=unconfined"], "SecurityOpt"),
    "writable-root": (("HostConfig", "ReadonlyRootfs"), False, "ReadonlyRootfs"),
    "no-memory-limit": (("HostConfig", "Memory"), 0, "Memory"),
    "swap": (("HostConfig", "MemorySwap"), -1, "MemorySwap"),
    "no-pids-limit": (("HostConfig", "PidsLimit"), -1, "PidsLimit"),
    "all-cpus": (("HostConfig", "NanoCpus"), 0, "NanoCpus"),
    "runtime": (("HostConfig", "Runtime"), "kata", "Runtime"),
    "tmpfs-elsewhere": (("HostConfig", "Tmpfs"), {"/etc": "rw,nosuid,nodev"}, "Tmpfs"),
    "tmpfs-suid": (("HostConfig", "Tmpfs"), {"/tmp": "rw,size=1m"}, "Tmpfs"),
    "volumes-from": (("HostConfig", "VolumesFrom"), ["postgres"], "VolumesFrom"),
    "ports": (("HostConfig", "PortBindings"), {"22/tcp": [{"HostPort": "2222"}]}, "PortBindings"),
    "other-image": (("Image",), "debian:bookworm", "Image"),
    "shell": (("Cmd",), ["sh", "-c", "id"], "Cmd"),
    "root": (("User",), "0:0", "User"),
    "root-name": (("User",), "root", "User"),
    "environment": (("Env",), ["LD_PRELOAD=/tmp/x.so"], "Env"),
    "entrypoint": (("Entrypoint",), ["/bin/sh"], "Entrypoint"),
    "unlabelled": (("Labels",), {"app": "x"}, "Labels"),
    "foreign-label": (("Labels",), {"airlock.sandbox": "1", "traefik.enable": "true"}, "Labels"),
    "stack-network-config": (("NetworkingConfig",), {"EndpointsConfig": {"airlock_default": {}}}, "NetworkingConfig"),
    "tty": (("Tty",), True, "Tty"),
}  # fmt: skip


def loosened(body: dict, path: tuple[str, ...], value: object) -> dict:
    """A copy of ``body`` with the field at ``path`` set to ``value``."""
    body = copy.deepcopy(body)
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


@pytest.mark.parametrize("change", list(LOOSENED), ids=list(LOOSENED))
def test_a_create_loosened_in_any_field_is_refused_naming_it(change):
    path, value, field = LOOSENED[change]
    with pytest.raises(Denied, match=field):
        plan(create(loosened(sandbox_create(), path, value)), POLICY)


@pytest.mark.parametrize("runtime", [None, "runsc"], ids=["runc", "runsc"])
def test_an_mcp_servers_create_passes_with_an_image_of_the_list_and_its_environment(runtime):
    body = server_create(runtime)
    sent = json.loads(plan(create(body), SERVERS).body)
    assert sent["Image"] == SERVER_IMAGE and "TOKEN=t" in sent["Env"]
    assert sent["HostConfig"] == body["HostConfig"] and sent["HostConfig"]["NetworkMode"] == "none"
    assert sent["Labels"]["airlock.server"] == "fetch"
    with pytest.raises(Denied, match="is not one an MCP server may run from .allowed: none"):
        plan(create(body), POLICY)  # a gate with no list runs no server


SERVER_LOOSENED = {
    **{change: LOOSENED[change] for change in (
        "privileged", "bind-root", "docker-socket", "mount", "cap-add", "host-network",
        "host-pid", "writable-root", "no-memory-limit", "runtime", "root", "entrypoint", "tty",
    )},
    "foreign-label": (("Labels", "traefik.enable"), "true", "Labels"),
    "other-image": (("Image",), "debian:bookworm", "debian:bookworm"),
    "sandbox-image": (("Image",), "airlock-sandbox:latest", "airlock-sandbox"),
    "bridge": (("HostConfig", "NetworkMode"), "bridge", "NetworkMode must be none"),
    "environment-shape": (("Env",), ["not an assignment"], "Env"),
    "environment-nul": (("Env",), ["A=b\u0000"], "Env"),
    "command-shape": (("Cmd",), "python3 -c pass", "Cmd"),
}  # fmt: skip


@pytest.mark.parametrize("change", list(SERVER_LOOSENED), ids=list(SERVER_LOOSENED))
def test_an_mcp_servers_create_loosened_in_any_field_is_refused_naming_it(change):
    path, value, field = SERVER_LOOSENED[change]
    with pytest.raises(Denied, match=field):
        plan(create(loosened(server_create(), path, value)), SERVERS)


def test_a_sandbox_create_still_takes_no_environment_whatever_the_server_list():
    body = sandbox_create()
    body["Env"] = ["LD_PRELOAD=/tmp/x.so"]
    with pytest.raises(Denied, match="Env"):
        plan(create(body), SERVERS)


@pytest.mark.parametrize(
    "method, target, why",
    [
        ("GET", "/v1.41/info", "not a call Airlock makes"),
        ("GET", "/info", "not a call Airlock makes"),
        ("POST", "/v1.41/containers/pg/exec", "does not exec"),
        ("POST", "/v1.41/exec/abc/start", "not a call Airlock makes"),
        ("GET", "/v1.41/images/json", "not a call Airlock makes"),
        ("GET", "/v1.41/images/debian:bookworm/json", "not a call Airlock makes"),
        ("POST", "/v1.41/images/create?fromImage=evil", "not a call Airlock makes"),
        ("POST", "/v1.41/build", "not a call Airlock makes"),
        ("POST", "/v1.41/volumes/create", "not a call Airlock makes"),
        ("GET", "/v1.41/containers/../info", "not one Airlock calls"),
        ("GET", "/v1.41/containers/%2e%2e/info", "not one Airlock calls"),
        ("GET", "/v1.41//info", "not one Airlock calls"),
        ("POST", "/v1.41/containers/x/update", "does not update"),
        ("PUT", "/v1.41/containers/x/archive?path=/", "does not archive"),
        ("GET", "/v1.41/containers/x/export", "does not export"),
        ("DELETE", "/v1.41/containers/x?link=1", "link"),
        ("POST", "/v1.41/containers/create?name=x", "does not take name"),
        ("GET", "/v1.41/containers/x/logs?details=1&stdout=1", "does not take details"),
        ("POST", "/v1.41/swarm/init", "not a call Airlock makes"),
    ],
)
def test_calls_airlock_does_not_make_are_refused(method, target, why):
    with pytest.raises(Denied, match=why):
        plan(Request(method, target), POLICY)


def test_a_body_on_any_call_but_create_is_refused():
    with pytest.raises(Denied, match="takes no body"):
        plan(Request("POST", "/v1.41/containers/x/start", b'{"Binds": ["/:/h"]}'), POLICY)


def test_listing_sees_only_sandboxes_and_a_prune_spares_them():
    listed = plan(
        Request("GET", '/v1.41/containers/json?all=1&filters={"status":["exited"]}'), POLICY
    )
    pruned = plan(Request("POST", "/v1.41/networks/prune"), POLICY)
    assert json.loads(dict(listed.query)["filters"]) == {
        "status": ["exited"],
        "label": ["airlock.sandbox"],
    }
    assert json.loads(dict(pruned.query)["filters"]) == {"label!": ["airlock.sandbox"]}


def container(name: str, labels: dict) -> dict:
    return {"Id": "f" * 64, "Name": f"/{name}", "Config": {"Labels": labels}}


WORKER = "10.0.0.5"
SANDBOX = container("sleepy_turing", {"airlock.sandbox": "1", "airlock.gate.peer": WORKER})
ALLOWED = container("app", {"airlock.actions": ""})
NAMED = container("web-2", {})
POSTGRES = container("airlock_postgres_1", {"com.docker.compose.service": "postgres"})


@pytest.mark.parametrize(
    "method, op, subject, allowed",
    [
        ("POST", "attach", SANDBOX, True),
        ("POST", "attach", ALLOWED, False),
        ("POST", "attach", POSTGRES, False),
        ("DELETE", "", SANDBOX, True),
        ("DELETE", "", ALLOWED, False),
        ("POST", "kill", SANDBOX, True),
        ("POST", "kill", POSTGRES, False),
        ("POST", "restart", ALLOWED, True),
        ("POST", "restart", NAMED, True),
        ("POST", "restart", SANDBOX, False),
        ("POST", "restart", POSTGRES, False),
        ("POST", "stop", POSTGRES, False),
        ("GET", "logs", ALLOWED, True),
        ("GET", "logs", SANDBOX, False),
        ("GET", "json", SANDBOX, True),
        ("GET", "json", ALLOWED, True),
        ("GET", "json", POSTGRES, False),
        ("POST", "start", SANDBOX, True),
        ("POST", "start", POSTGRES, False),
    ],
)
def test_each_container_operation_reaches_only_what_it_is_for(method, op, subject, allowed):
    target = f"/v1.41/containers/{subject['Name'][1:]}" + (f"/{op}" if op else "")
    planned = plan(Request(method, target), POLICY)
    if allowed:
        sent = judge(planned, subject, TARGETS, WORKER)
        assert sent.path == f"/containers/{subject['Id']}" + (f"/{op}" if op else "")
    else:
        with pytest.raises(Denied):
            judge(planned, subject, TARGETS, WORKER)


@pytest.mark.parametrize("method, op", [("POST", "attach"), ("POST", "start"), ("POST", "wait"),
                                        ("POST", "kill"), ("DELETE", "")])  # fmt: skip
def test_only_the_worker_that_made_a_sandbox_reaches_into_it(method, op):
    target = "/v1.41/containers/sleepy_turing" + (f"/{op}" if op else "")
    with pytest.raises(Denied, match="another client started it"):
        judge(plan(Request(method, target), POLICY), SANDBOX, TARGETS, "10.0.0.6")
    inspected = judge(plan(Request("GET", "/containers/sleepy_turing/json"), POLICY), SANDBOX,
                      TARGETS, "10.0.0.6")  # fmt: skip
    assert inspected.container == SANDBOX["Id"]


def test_a_create_is_labelled_with_its_clients_address_whatever_it_said():
    body = sandbox_create()
    body["Labels"]["airlock.gate.peer"] = "10.0.0.6"  # a forged creator
    planned = plan(Request("POST", "/containers/create", json.dumps(body).encode(), WORKER), POLICY)
    assert json.loads(planned.body)["Labels"]["airlock.gate.peer"] == WORKER


def test_an_unknown_container_is_a_lookup_error():
    with pytest.raises(LookupError):
        judge(plan(Request("GET", "/containers/nope/json"), POLICY), None, TARGETS)


def test_target_rules_parse_and_match():
    targets = Targets.parse("label:team=ops, name:app-*, label:airlock.actions")
    assert targets.allows("/app-1", {}) and targets.allows("x", {"team": "ops"})
    assert targets.allows("x", {"airlock.actions": "anything"})
    assert not targets.allows("x", {"team": "dev"}) and not targets.allows("/app", {})
    assert not targets.allows("app-1", {"airlock.sandbox": "1"})  # never a sandbox
    assert Targets.parse("*").allows("postgres", {})
    assert not Targets.parse("").allows("postgres", {})
    assert "label:team=ops" in targets.describe()


@pytest.mark.parametrize("text", ["postgres", "label:", "colour:red", "label:=x", "name:"])
def test_a_rule_that_does_not_parse_says_so(text):
    with pytest.raises(BadRules, match="rule|label"):
        Targets.parse(text)


def test_the_gate_knows_sandboxes_by_the_label_the_backends_give_them():
    assert SANDBOX_LABEL == reaper.LABEL


def test_the_gate_imports_the_standard_library_only():
    package = Path(__file__).resolve().parents[2] / "dockergate"
    outside = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            outside |= {n.split(".")[0] for n in names} - set(sys.stdlib_module_names)
    assert outside == set()
