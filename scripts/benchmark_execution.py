#!/usr/bin/env python
"""Benchmark the hot path: proposal → result, through a real embedded deployment.

Starts ``manage.py serve`` on a fresh data dir, then for N proposals of
``print(1)`` measures the time from POST /api/v1/proposals to a finished
result (long-poll on the proposal, then the execution), beside the same
script run directly in the same sandbox backend in this process. Prints a
table of medians and p95s and the overhead ratio.

    .venv/bin/python scripts/benchmark_execution.py [--runs 30] [--backend local] [--scale]

``--scale`` runs the same against the scale deployment's parts: PostgreSQL
(a database made for the run and dropped after it) and Redis as the broker
and channel layer (``--database-url``, ``--redis-url``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarking import percentile, run_in_sandbox  # noqa: E402
from tests.serving import Server, start_server  # noqa: E402


def through_airlock(server: Server) -> float:
    started = time.perf_counter()
    proposal = server.propose_script("print(1)")
    while proposal.get("execution_status") not in ("succeeded", "failed", "timed_out"):
        _, proposal = server.api("GET", f"/api/v1/proposals/{proposal['id']}?wait=10")
    elapsed = time.perf_counter() - started
    _, result = server.api("GET", f"/api/v1/executions/{proposal['execution_id']}")
    assert result["stdout"] == "1\n", result
    return elapsed


def direct(backend: str) -> float:
    started = time.perf_counter()
    run_in_sandbox(backend, "print(1)")
    return time.perf_counter() - started


@contextlib.contextmanager
def scale_env(database_url: str, redis_url: str):
    """Environment for serve on a fresh PostgreSQL database and the given Redis."""
    import psycopg

    name = f"airlock_bench_{os.getpid()}"
    admin = database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield {
            "DATABASE_URL": database_url.rsplit("/", 1)[0] + f"/{name}",
            "SECRET_KEY": f"benchmark-{name}",
            "REDIS_URL": redis_url,
            "CHANNEL_LAYER_PREFIX": name,
        }
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--scale", action="store_true", help="PostgreSQL + Redis")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="airlock-bench-"))
        env = (
            stack.enter_context(scale_env(args.database_url, args.redis_url)) if args.scale else {}
        )
        server = start_server(Path(data_dir), backend=args.backend, extra_env=env)
        try:
            through_airlock(server)  # warm-up
            airlock = [through_airlock(server) for _ in range(args.runs)]
        finally:
            server.stop()
    direct(args.backend)
    sandbox = [direct(args.backend) for _ in range(args.runs)]
    deployment = "scale (PostgreSQL + Redis)" if args.scale else "embedded (SQLite)"
    print(f"backend={args.backend} runs={args.runs} deployment={deployment}")
    print("| path | p50 ms | p95 ms | p50 vs sandbox |")
    print("|---|---|---|---|")
    base_p50 = statistics.median(sandbox)
    for name, values in [("sandbox run only", sandbox), ("proposal → result via API", airlock)]:
        p50 = statistics.median(values)
        p95 = percentile(values, 0.95)
        print(f"| {name} | {p50 * 1000:.1f} | {p95 * 1000:.1f} | {p50 / base_p50:.1f}× |")


if __name__ == "__main__":
    main()
