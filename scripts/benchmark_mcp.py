#!/usr/bin/env python
"""Benchmark ``print(1)`` through MCP end to end, beside the same through REST, in one run.

Starts ``manage.py serve`` on a fresh data dir. Each round (interleaved, so
the host's load falls on every path alike) times, from the agent's side:

- REST: POST /api/v1/proposals, long-poll the proposal until its execution
  finished, GET the execution (``benchmark_execution.py``'s path);
- MCP over streamable HTTP: one ``tools/call`` of ``script_execute`` with
  the official SDK's client (connected once, as an agent stays connected);
- MCP through the stdio bridge (``manage.py mcp-stdio``), launched once.

and prints a table of medians and p95s.

    .venv/bin/python scripts/benchmark_mcp.py [--runs 30] [--backend local]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from tests.serving import Server, start_server  # noqa: E402

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


async def measure(server: Server, data_dir: Path, runs: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"rest": [], "http": [], "stdio": []}
    async with over_http(server) as http, over_stdio(server, data_dir) as stdio:
        for _ in range(2):  # warm-up: every web process, both clients
            await asyncio.to_thread(through_airlock, server)
            await through_mcp(http)
            await through_mcp(stdio)
        for _ in range(runs):
            timings["rest"].append(await asyncio.to_thread(through_airlock, server))
            timings["http"].append(await through_mcp(http))
            timings["stdio"].append(await through_mcp(stdio))
    return timings


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
            timings = asyncio.run(measure(server, Path(data_dir), args.runs))
        finally:
            server.stop()
    print(f"backend={args.backend} runs={args.runs} deployment=embedded (SQLite)")
    print("| path | p50 ms | p95 ms | p50 vs REST |")
    print("|---|---|---|---|")
    rest_p50 = statistics.median(timings["rest"])
    for name, key in [
        ("REST: POST, long-poll, GET execution", "rest"),
        ("MCP over streamable HTTP: one tools/call", "http"),
        ("MCP through the stdio bridge: one tools/call", "stdio"),
    ]:
        p50 = statistics.median(timings[key])
        p95 = percentile(timings[key], 0.95)
        print(f"| {name} | {p50 * 1000:.1f} | {p95 * 1000:.1f} | {p50 / rest_p50:.2f}× |")


if __name__ == "__main__":
    main()
