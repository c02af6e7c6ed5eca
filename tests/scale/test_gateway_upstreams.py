"""The MCP gateway on the compose deployment: an upstream run from an image, through the gate.

The web image holds no MCP server: the stack's gate lets the gateway run the
suite's upstream from its image (``DOCKER_GATE_SERVER_IMAGES``, set by the
``stack`` fixture), and refuses any other image. The server's tools try to
reach the stack's own services and read its secrets, and find nothing. The
same image with a network list reaches what the list names, through the web
container's proxy, and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

from tests.mcp.conftest import connect, text_of

from .stack import Stack, wait_for

ALLOW_BOX = (
    "from approvals.policy.rules import current_policy, update_policy; "
    "d = current_policy().as_data(); "
    "d['allow'] = [*d['allow'], {'kind': 'tool', 'pattern': 'box.*', 'note': 'scale'}, "
    "{'kind': 'tool', 'pattern': 'net.*', 'note': 'scale'}]; "
    "update_policy(d, comment='scale suite: the boxed upstream', actor='system')"
)


def apply(stack: Stack, upstreams: dict) -> None:
    text = json.dumps({"upstreams": upstreams})
    stack.manage(
        "shell", "-c", f"from approvals.gateway import config; config.apply({text!r}, 'scale')"
    )


def server_containers(stack: Stack, name: str) -> list[dict]:
    ids = stack.docker("ps", "-aq", "--filter", f"label=airlock.server={name}").split()
    # One may be removed between the two reads: inspect says so and gives the others.
    found = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True)
    return json.loads(found.stdout or "[]") if ids else []


def call_all(stack: Stack, token: str, upstream: str, calls: dict) -> dict[str, str]:
    """What each of ``calls`` (``what: (tool, arguments)``) of ``upstream`` answered."""

    async def calling() -> dict[str, str]:
        said = {}
        async with connect(stack.url + "/mcp", token) as client:
            for what, (tool, arguments) in calls.items():
                result = await client.call_tool(f"{upstream}__{tool}", arguments)
                assert result.is_error is False, text_of(result)
                said[what] = text_of(result)
        return said

    return asyncio.run(calling())


def test_an_upstream_from_an_image_runs_through_the_gate_and_reaches_nothing_of_the_stack(
    stack: Stack,
):
    image = stack.env["DOCKER_GATE_SERVER_IMAGES"]
    apply(stack, {
        "box": {"image": image, "env": {"GIVEN": "yes"}},
        "other": {"image": "airlock-sandbox:latest", "command": ["python3", "-c", "pass"]},
        "net": {"image": image, "network": ["web:8000"]},
    })  # fmt: skip
    stack.manage("shell", "-c", ALLOW_BOX)
    token = stack.manage(
        "create_agent", "scale-boxer", "--capability", "tool.call:box.*",
        "--capability", "tool.call:net.*",
    )  # fmt: skip

    said = call_all(stack, token, "box", {
        "echo": ("echo", {"text": "hi"}),
        "given": ("getenv", {"name": "GIVEN"}),
        "secret key": ("getenv", {"name": "SECRET_KEY"}),
        "database url": ("getenv", {"name": "DATABASE_URL"}),
        "postgres": ("probe", {"host": "postgres", "port": 5432}),
        "redis": ("probe", {"host": "redis", "port": 6379}),
        "web": ("probe", {"host": "web", "port": 8000}),
        "the gate": ("probe", {"host": "dockergate", "port": 2375}),
        "an outside address": ("probe", {"host": "1.1.1.1", "port": 53}),
        "the data dir": ("probe", {"folder": "/var/lib/airlock"}),
        "the engine": ("probe", {"path": "/var/run/docker.sock"}),
    })  # fmt: skip
    assert (said.pop("echo"), said.pop("given")) == ("echo: hi", "yes")
    assert (said.pop("secret key"), said.pop("database url")) == ("<unset>", "<unset>")
    assert {what: text for what, text in said.items() if not text.startswith("refused")} == {}

    containers = server_containers(stack, "box")
    assert containers  # on the host's engine, made through the gate by a web container
    for container in containers:
        assert container["HostConfig"]["NetworkMode"] == "none"
        assert container["Config"]["Labels"]["airlock.gate.peer"]
        assert container["Config"]["Image"] == image

    checked = subprocess.run(
        ["docker", "exec", stack.container("web"), "python", "manage.py", "upstreams", "check",
         "other"], capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode != 0
    assert "Image 'airlock-sandbox:latest' is not one an MCP server may run from" in checked.stdout
    assert server_containers(stack, "other") == []

    said = call_all(stack, token, "net", {
        "listed": ("fetch", {"host": "web", "port": 8000}),
        "postgres, through the proxy": ("fetch", {"host": "postgres", "port": 5432}),
        "web, around the proxy": ("probe", {"host": "web", "port": 8000}),
        "the gate": ("probe", {"host": "dockergate", "port": 2375}),
        "the proxies' volume": ("probe", {"folder": "/egress"}),
    })  # fmt: skip
    assert said.pop("listed").startswith("answered "), said
    assert said["postgres, through the proxy"].endswith("403 Forbidden"), said
    assert {what: text for what, text in said.items() if not text.startswith("refused")} == {}
    networked_containers = server_containers(stack, "net")
    relays = [c for c in networked_containers if c["Config"]["Labels"].get("airlock.relay")]
    assert relays and len(relays) * 2 == len(networked_containers)
    for relay in relays:
        assert [m["Name"] for m in relay["Mounts"]] == [stack.env["MCP_EGRESS_VOLUME"]]

    apply(stack, {})  # removed: every web container ends its server, called or not
    wait_for(
        lambda: not server_containers(stack, "box") + server_containers(stack, "net"), 30,
        "the removed upstreams' servers to end",
    )  # fmt: skip
