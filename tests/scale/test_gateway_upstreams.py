"""The MCP gateway on the compose deployment: an upstream run from an image, through the gate.

The web image holds no MCP server: the stack's gate lets the gateway run the
suite's upstream from its image (``DOCKER_GATE_SERVER_IMAGES``, set by the
``stack`` fixture), and refuses any other image. The server's tools try to
reach the stack's own services and read its secrets, and find nothing.
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
    "d['allow'] = [*d['allow'], {'kind': 'tool', 'pattern': 'box.*', 'note': 'scale'}]; "
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


def test_an_upstream_from_an_image_runs_through_the_gate_and_reaches_nothing_of_the_stack(
    stack: Stack,
):
    image = stack.env["DOCKER_GATE_SERVER_IMAGES"]
    apply(stack, {
        "box": {"image": image, "env": {"GIVEN": "yes"}},
        "other": {"image": "airlock-sandbox:latest", "command": ["python3", "-c", "pass"]},
    })  # fmt: skip
    stack.manage("shell", "-c", ALLOW_BOX)
    token = stack.manage("create_agent", "scale-boxer", "--capability", "tool.call:box.*")

    async def calls() -> dict[str, str]:
        async with connect(stack.url + "/mcp", token) as client:

            async def call(tool: str, **arguments) -> str:
                result = await client.call_tool(f"box__{tool}", arguments)
                assert result.is_error is False, text_of(result)
                return text_of(result)

            return {
                "echo": await call("echo", text="hi"),
                "given": await call("getenv", name="GIVEN"),
                "secret key": await call("getenv", name="SECRET_KEY"),
                "database url": await call("getenv", name="DATABASE_URL"),
                "postgres": await call("probe", host="postgres", port=5432),
                "redis": await call("probe", host="redis", port=6379),
                "web": await call("probe", host="web", port=8000),
                "the gate": await call("probe", host="dockergate", port=2375),
                "an outside address": await call("probe", host="1.1.1.1", port=53),
                "the data dir": await call("probe", folder="/var/lib/airlock"),
                "the engine": await call("probe", path="/var/run/docker.sock"),
            }

    said = asyncio.run(calls())
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

    apply(stack, {})  # removed: every web container ends its server, called or not
    wait_for(
        lambda: not server_containers(stack, "box"), 30, "the removed upstream's servers to end"
    )
