#!/usr/bin/env python
"""Benchmark the hot path: proposal → result, through a real embedded deployment.

Starts ``manage.py serve`` on a fresh data dir, then for N proposals of
``print(1)`` measures the time from POST /api/v1/proposals to the result in
hand (``--flow one-call``: the POST itself waits, ``?wait=10&until=finished``,
and its answer carries the result; ``--flow poll``: a POST, then long-polls
of the proposal; a deployment that answers without ``result`` is asked for
the execution, timed too), beside the
same script run directly in the same sandbox backend in this process, in
alternating blocks of ten so that both meet the host as it is in the same
minute. Prints a table of medians and p95s and the overhead ratio.

    .venv/bin/python scripts/benchmark_execution.py [--runs 30] [--backend local] [--scale]
                                                    [--json PATH]

``--scale`` runs the same against the scale deployment's parts: PostgreSQL
(a database made for the run and dropped after it) and Redis as the broker
and channel layer (``--database-url``, ``--redis-url``).

``--against DIR`` compares this checkout with another one (say, ``git
worktree add /tmp/before HEAD~1``): both deployments run at once and the
proposals alternate between them, so each pair meets the host in the same
moment; it prints both and the median of the pairs' differences.

``--json PATH`` also writes the p50s and p95s (ms) to PATH as a JSON object.
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
BLOCK = 10  # runs of one path in a row
PAUSE_SECONDS = 0.3  # between blocks: the last run's background work ends
sys.path.insert(0, str(ROOT))

from scripts.benchmarking import percentile, run_in_sandbox, write_json  # noqa: E402
from tests.serving import Server, start_server  # noqa: E402

FLOWS = {
    # The agent's fewest calls: propose, and the answer comes once it has run.
    "one-call": "?wait=10&until=finished",
    # Propose, then long-poll the proposal until it has run.
    "poll": "",
}


def through_airlock(server: Server, flow: str = "one-call") -> float:
    started = time.perf_counter()
    proposal = server.propose_script("print(1)", query=FLOWS[flow])
    while proposal.get("execution_status") not in ("succeeded", "failed", "timed_out"):
        _, proposal = server.api(
            "GET", f"/api/v1/proposals/{proposal['id']}?wait=10&until=finished"
        )
    # The result in hand: inline in the answer (until=finished), else one more call.
    result = proposal.get("result")
    if result is None:
        _, result = server.api("GET", f"/api/v1/executions/{proposal['execution_id']}")
    elapsed = time.perf_counter() - started
    assert result["stdout"] == "1\n", result
    return elapsed


def direct(backend: str) -> float:
    started = time.perf_counter()
    run_in_sandbox(backend, "print(1)")
    return time.perf_counter() - started


@contextlib.contextmanager
def scale_env(database_url: str, redis_url: str, tag: str = ""):
    """Environment for serve on a fresh PostgreSQL database and the given Redis."""
    import psycopg

    name = f"airlock_bench_{os.getpid()}{tag}"
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
    parser.add_argument(
        "--flow", choices=FLOWS, default="one-call", help="how the agent waits for the result"
    )
    parser.add_argument("--against", type=Path, help="another checkout to compare, run alongside")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--json", help="also write the figures to this file, as JSON")
    args = parser.parse_args()
    checkouts = {"this checkout": ROOT}
    if args.against:
        checkouts[f"{args.against}"] = args.against.resolve()
    with contextlib.ExitStack() as stack:
        servers = {}
        for index, (name, checkout) in enumerate(checkouts.items()):
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="airlock-bench-"))
            env = {}
            if args.scale:
                redis_url = args.redis_url.rsplit("/", 1)[0] + f"/{13 - index}"
                env = stack.enter_context(scale_env(args.database_url, redis_url, f"_{index}"))
            server = start_server(
                Path(data_dir), backend=args.backend, extra_env=env, checkout=checkout
            )
            stack.callback(server.stop)
            through_airlock(server)  # warm-up
            servers[name] = server
        direct(args.backend)  # warm-up
        times = {name: [] for name in servers}
        sandbox = []
        # Blocks of each in turn, so that the baseline meets the host as it
        # is in the same minute. Within a block each path runs back to back,
        # with the background work of its own previous run (a sandbox starts
        # the next interpreter after a run), not the other path's: a pause
        # between blocks lets that work end.
        for block in range(0, args.runs, BLOCK):
            for run in range(block, min(block + BLOCK, args.runs)):
                for name in sorted(servers, reverse=bool(run % 2)):  # who goes first alternates
                    times[name].append(through_airlock(servers[name], args.flow))
            time.sleep(PAUSE_SECONDS)
            sandbox += [direct(args.backend) for _ in range(min(BLOCK, args.runs - block))]
            time.sleep(PAUSE_SECONDS)
    deployment = "scale (PostgreSQL + Redis)" if args.scale else "embedded (SQLite)"
    print(f"backend={args.backend} runs={args.runs} deployment={deployment} flow={args.flow}")
    print("| path | p50 ms | p95 ms | p50 vs sandbox |")
    print("|---|---|---|---|")
    base_p50 = statistics.median(sandbox)
    label = "proposal → result via API"
    rows = [("sandbox run only", sandbox)]
    rows += [(f"{label} ({name})" if args.against else label, v) for name, v in times.items()]
    for name, values in rows:
        p50 = statistics.median(values)
        p95 = percentile(values, 0.95)
        print(f"| {name} | {p50 * 1000:.1f} | {p95 * 1000:.1f} | {p50 / base_p50:.1f}× |")
    if args.against:
        ours, theirs = times.values()
        differences = [a - b for a, b in zip(ours, theirs, strict=True)]
        faster = sum(d < 0 for d in differences)
        print(
            f"\nthis checkout − {args.against}, per pair: median "
            f"{statistics.median(differences) * 1000:+.1f} ms; faster in {faster} of {len(differences)}"
        )
    write_json(args.json, {
        "backend": args.backend, "runs": args.runs, "deployment": deployment, "flow": args.flow,
        "sandbox": summary(sandbox),
        "proposal_to_result": {name: summary(values) for name, values in times.items()},
    })  # fmt: skip


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(values) * 1000, "p95_ms": percentile(values, 0.95) * 1000}


if __name__ == "__main__":
    main()
