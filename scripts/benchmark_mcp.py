#!/usr/bin/env python
"""Benchmark ``print(1)`` through MCP end to end, beside the same through REST, in one run.

Starts ``manage.py serve`` on a fresh data dir. Each round (interleaved, so
the host's load falls on every path alike) times, from the agent's side:

- REST: POST /api/v1/proposals, long-poll the proposal until its execution
  finished, GET the execution (``benchmark_execution.py``'s path);
- MCP over streamable HTTP: one ``tools/call`` of ``script_execute`` with
  the official SDK's client (connected once, as an agent stays connected);
- MCP through the stdio bridge (``manage.py mcp-stdio``), launched once;

and, for the MCP gateway, an upstream's tool (``tests.gateway.upstream``'s
``echo``, over stdio) called through Airlock's ``/mcp`` as ``up__echo``
(allowed by policy: proposed, decided, audited, called upstream, reported)
beside the same upstream called directly, connected once. It prints a table
of medians and p95s for each.

    .venv/bin/python scripts/benchmark_mcp.py [--runs 30] [--backend local]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from scripts.benchmark_execution import through_airlock  # noqa: E402
from scripts.benchmarking import percentile  # noqa: E402
from tests.serving import Server, manage, start_server  # noqa: E402

ARGUMENTS = {"language": "python", "code": "print(1)"}


async def through_mcp(client: Client) -> float:
    started = time.perf_counter()
    result = await client.call_tool("script_execute", ARGUMENTS)
    elapsed = time.perf_counter() - started
    assert result.structured_content["execution"]["stdout"] == "1\n", result
    return elapsed


@contextlib.asynccontextmanager
async def over_http(server: Server):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.token}"})
    async with http, Client(streamable_http_client(server.base + "/mcp", http_client=http)) as c:
        yield c


@contextlib.asynccontextmanager
async def over_stdio(server: Server, data_dir: Path):
    bridge = StdioServerParameters(
        command=sys.executable,
        args=[str(ROOT / "manage.py"), "mcp-stdio", "--url", server.base],
        env={"AIRLOCK_TOKEN": server.token, "AIRLOCK_DATA_DIR": str(data_dir)},
        cwd=str(ROOT),
    )
    with open(os.devnull, "w") as quiet:
        async with Client(stdio_client(bridge, errlog=quiet), mode="legacy") as client:
            yield client


def upstream() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.gateway.upstream", "stdio"],
        env={"PYTHONPATH": str(ROOT)},
    )


def behind_the_gateway(data_dir: Path) -> None:
    """The upstream behind Airlock (sandboxed: it reads its code), its echo allowed by policy."""
    command = upstream()
    config = {"command": [command.command, *command.args], "env": command.env}
    listed = {"upstreams": {"up": {**config, "read": [str(ROOT / "tests")]}}}
    (data_dir / "upstreams.yaml").write_text(json.dumps(listed))  # JSON is YAML
    manage(data_dir, "upstreams", "apply", str(data_dir / "upstreams.yaml"))
    allow = [{"kind": "tool", "pattern": "up.echo", "note": "benchmark"}]
    manage(
        data_dir,
        "shell",
        "-c",
        "from approvals.policy.rules import DEFAULT_POLICY, update_policy; "
        f"update_policy({{**DEFAULT_POLICY, 'allow': {allow!r}}}, None, 'bench', actor='bench')",
    )


async def echo(client: Client, name: str) -> float:
    started = time.perf_counter()
    result = await client.call_tool(name, {"text": "hi"})
    elapsed = time.perf_counter() - started
    assert result.structured_content == {"result": "echo: hi"}, result
    return elapsed


async def measure(server: Server, data_dir: Path, runs: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {k: [] for k in ("rest", "http", "stdio", "direct", "gw")}
    async with (
        over_http(server) as http,
        over_stdio(server, data_dir) as stdio,
        Client(upstream()) as direct,
    ):
        for _ in range(2):  # warm-up: every web process, every client, the upstream started
            await asyncio.to_thread(through_airlock, server)
            await through_mcp(http)
            await through_mcp(stdio)
            await echo(direct, "echo")
            await echo(http, "up__echo")
        for _ in range(runs):
            timings["rest"].append(await asyncio.to_thread(through_airlock, server))
            timings["http"].append(await through_mcp(http))
            timings["stdio"].append(await through_mcp(stdio))
            timings["direct"].append(await echo(direct, "echo"))
            timings["gw"].append(await echo(http, "up__echo"))
    return timings


def table(timings: dict[str, list[float]], rows: list[tuple[str, str]], against: str) -> None:
    print(f"| path | p50 ms | p95 ms | p50 vs {against} |")
    print("|---|---|---|---|")
    base = statistics.median(timings[rows[0][1]])
    for name, key in rows:
        p50 = statistics.median(timings[key])
        p95 = percentile(timings[key], 0.95)
        print(f"| {name} | {p50 * 1000:.1f} | {p95 * 1000:.1f} | {p50 / base:.2f}× |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--backend", default="local")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="airlock-bench-") as data_dir:
        server = start_server(Path(data_dir), backend=args.backend)
        try:
            behind_the_gateway(Path(data_dir))
            timings = asyncio.run(measure(server, Path(data_dir), args.runs))
        finally:
            server.stop()
    print(f"backend={args.backend} runs={args.runs} deployment=embedded (SQLite)")
    table(
        timings,
        [
            ("REST: POST, long-poll, GET execution", "rest"),
            ("MCP over streamable HTTP: one tools/call", "http"),
            ("MCP through the stdio bridge: one tools/call", "stdio"),
        ],
        "REST",
    )
    print()
    table(
        timings,
        [
            ("an upstream's tool called directly (stdio, connected once)", "direct"),
            ("the same through the MCP gateway (allowed by policy)", "gw"),
        ],
        "direct",
    )


if __name__ == "__main__":
    main()
