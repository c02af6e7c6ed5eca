#!/usr/bin/env python
"""Benchmark the hot path: proposal → result, through a real embedded deployment.

Starts ``manage.py serve`` on a fresh data dir, then for N proposals of
``print(1)`` measures the time from POST /api/v1/proposals to a finished
result (long-poll on the proposal, then the execution), beside the same
script run directly in the same sandbox backend in this process. Prints a
table of medians and p95s and the overhead ratio.

    .venv/bin/python scripts/benchmark_execution.py [--runs 30] [--backend local]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.serving import Server, start_server  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


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
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from executions.sandboxes import RunRequest, get_sandbox
    from executions.sandboxes.base import MemorySink

    sandbox = get_sandbox(backend)
    started = time.perf_counter()
    sandbox.run(RunRequest("python", "print(1)"), MemorySink())
    return time.perf_counter() - started


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
            through_airlock(server)  # warm-up
            airlock = [through_airlock(server) for _ in range(args.runs)]
        finally:
            server.stop()
    direct(args.backend)
    sandbox = [direct(args.backend) for _ in range(args.runs)]
    print(f"backend={args.backend} runs={args.runs}")
    print("| path | p50 ms | p95 ms | p50 vs sandbox |")
    print("|---|---|---|---|")
    base_p50 = statistics.median(sandbox)
    for name, values in [("sandbox run only", sandbox), ("proposal → result via API", airlock)]:
        p50 = statistics.median(values)
        p95 = percentile(values, 0.95)
        print(f"| {name} | {p50 * 1000:.1f} | {p95 * 1000:.1f} | {p50 / base_p50:.1f}× |")


if __name__ == "__main__":
    main()
