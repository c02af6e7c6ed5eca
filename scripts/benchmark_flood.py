#!/usr/bin/env python
"""A runaway agent against a live deployment: what its flood costs everyone else.

Starts ``manage.py serve`` on a fresh data dir with the default policy
(``max_pending`` 100, ``max_proposals_per_minute`` 600), then measures, each for
``--seconds``, first without and then with a flood:

- a well-behaved agent proposing one action at a time (its create's latency);
- a reviewer reading the queue (``GET /api/v1/proposals?status=pending``) one
  read at a time, with a console open on ``/ws/queue/``;
- the flood: ``--clients`` connections of one agent proposing as fast as the
  server answers, each a proposal that waits for review.

Prints the flood's answers (created, 429 too_many_pending / rate_limited), the
pending proposals the flooding agent holds at the end, and for the other agent
and the reviewer p50 and p95 with and without the flood, side by side.

    .venv/bin/python scripts/benchmark_flood.py [--clients 8] [--seconds 5] [--web-processes 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import websockets  # noqa: E402

from scripts.benchmark_api import Connection  # noqa: E402
from scripts.benchmarking import percentile  # noqa: E402
from tests.serving import agent_token, reviewer_token, start_server  # noqa: E402

HELD = {
    "action": "host.restart_service",
    "parameters": {"service_name": "nginx"},
    "reason": "benchmark: waits for review",
}
QUEUE = "/api/v1/proposals?status=pending&limit=50"


async def one_at_a_time(
    base: str, token: str, method: str, path: str, body, until: float, pace: float
):
    """Latencies of requests sent one after another on one connection until ``until``,
    ``pace`` seconds apart (a person's or a well-behaved agent's pace)."""
    connection = Connection(base, token)
    await connection.open()
    data = json.dumps(body).encode() if body else b""
    latencies, statuses = [], Counter()
    try:
        while time.perf_counter() < until:
            started = time.perf_counter()
            status, _ = await connection.request(method, path, data)
            latencies.append(time.perf_counter() - started)
            statuses[status] += 1
            await asyncio.sleep(pace)
    finally:
        connection.close()
    return latencies, statuses


async def flood(base: str, token: str, clients: int, until: float) -> Counter:
    answers: Counter = Counter()
    data = json.dumps(HELD).encode()

    async def client() -> None:
        connection = Connection(base, token)
        await connection.open()
        try:
            while time.perf_counter() < until:
                status, payload = await connection.request("POST", "/api/v1/proposals", data)
                kind = json.loads(payload).get("error", {}).get("type") if status >= 400 else ""
                answers[f"{status} {kind}".strip()] += 1
        finally:
            connection.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return answers


async def console(base: str, token: str, stop: asyncio.Event) -> int:
    frames = 0
    async with websockets.connect(
        base.replace("http", "ws", 1) + "/ws/queue/",
        additional_headers={"Authorization": f"Bearer {token}", "Origin": base},
        max_size=None,
    ) as ws:
        await ws.recv()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ws.recv(), 0.2)
                frames += 1
    return frames


async def period(server, tokens: dict, seconds: float, clients: int) -> dict:
    until = time.perf_counter() + seconds
    stop = asyncio.Event()
    watcher = asyncio.create_task(console(server.base, tokens["reviewer"], stop))
    # Well within its own limits: 5 a second, fewer than max_pending over both periods.
    other = one_at_a_time(
        server.base, tokens["other"], "POST", "/api/v1/proposals", HELD, until, 0.2
    )
    queue = one_at_a_time(server.base, tokens["reviewer"], "GET", QUEUE, None, until, 0.05)
    tasks = [other, queue] + (
        [flood(server.base, tokens["flood"], clients, until)] if clients else []
    )
    results = await asyncio.gather(*tasks)
    stop.set()
    frames = await watcher
    return {
        "other": results[0],
        "queue": results[1],
        "flood": results[2] if clients else Counter(),
        "frames": frames,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--web-processes", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="airlock-flood-") as data_dir:
        server = start_server(
            Path(data_dir), serve_args=["--web-processes", str(args.web_processes)]
        )
        try:
            tokens = {
                "flood": agent_token(data_dir, "runaway", "*"),
                "other": agent_token(data_dir, "steady", "*"),
                "reviewer": reviewer_token(data_dir),
            }
            quiet = asyncio.run(period(server, tokens, args.seconds, 0))
            loud = asyncio.run(period(server, tokens, args.seconds, args.clients))
            _, page = server.api(
                "GET",
                "/api/v1/proposals?status=pending&agent=runaway&limit=200",
                token=tokens["reviewer"],
            )
        finally:
            server.stop()
    answers = loud["flood"]
    total = sum(answers.values())
    print(
        f"flood: {args.clients} connections of one agent for {args.seconds:g} s, "
        f"{args.web_processes} web processes (SQLite)"
    )
    for answer, count in answers.most_common():
        print(f"  {answer:<28} {count:>7}  ({count / args.seconds:,.0f}/s)")
    print(f"  answered in all: {total:,} ({total / args.seconds:,.0f}/s)")
    print(f"  the runaway agent's pending proposals at the end: {len(page['items'])}\n")
    print(
        f"| {'who':<38} | {'p50 quiet':>9} | {'p50 flood':>9} | {'ratio':>5} "
        f"| {'p95 quiet':>9} | {'p95 flood':>9} | {'ratio':>5} |"
    )
    print(f"|{'-' * 40}|{'-' * 11}|{'-' * 11}|{'-' * 7}|{'-' * 11}|{'-' * 11}|{'-' * 7}|")
    for name, label in (("other", "another agent's create"), ("queue", "a reviewer's queue read")):
        (q, qs), (f, fs) = quiet[name], loud[name]
        row = [percentile(q, 0.5), percentile(f, 0.5), percentile(q, 0.95), percentile(f, 0.95)]
        print(
            f"| {label:<38} | {row[0] * 1000:>7.1f}ms | {row[1] * 1000:>7.1f}ms | "
            f"{row[1] / row[0]:>5.2f} | {row[2] * 1000:>7.1f}ms | {row[3] * 1000:>7.1f}ms | "
            f"{row[3] / row[2]:>5.2f} |"
        )
        bad = {s: n for s, n in (fs + qs).items() if s >= 400}
        if bad:
            print(f"  ! {label} answered errors: {bad}")
    print(f"\nconsole updates received: {quiet['frames']} quiet, {loud['frames']} during the flood")


if __name__ == "__main__":
    main()
