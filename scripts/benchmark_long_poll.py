#!/usr/bin/env python
"""Benchmark long-polling agents: what N waiting calls cost the web process.

Starts ``manage.py serve`` on a fresh data dir (embedded SQLite). For each N,
N agents' calls wait on N pending proposals (``GET …?wait=60``); meanwhile the
script measures the web process's CPU use and the latency of ordinary API reads,
then rejects every proposal and measures how long the waiters take to answer.
With ``--lists`` the N calls wait on the agent's list instead (``GET
/api/v1/proposals?since_id=…&wait=60``: for a new proposal), and one new
proposal ends every wait. N = 0 is the baseline measured in the same run.

``--queries`` (with ``--lists``) then counts what the largest N of waiting lists cost
the database: in this process, on the deployment's database, a long-poll watcher of
its own holds N list calls on another agent's list, and every statement SQLite runs
on the watcher's thread is counted, per tick while nothing changes (5 s), then in
the tick that reads one new proposal (which none of them wants).

    .venv/bin/python scripts/benchmark_long_poll.py [--waiters 0,50,200] [--reads 40] [--lists]
                                                    [--queries] [--json PATH]

``--json PATH`` also writes the figures to PATH as a JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarking import percentile, write_json  # noqa: E402
from tests.serving import FOREIGN_ENV, Server, agent_token, reviewer_token, start_server  # noqa: E402

PENDING_CODE = "import os\nprint(os.listdir('.'))"  # medium risk: waits for a reviewer
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / TICKS


def measure(
    server: Server, reviewer: str, pids: list[int], waiters: int, reads: int, lists: bool = False
) -> dict:
    probe = server.propose_script(PENDING_CODE, reason="probe")
    pending = [
        probe if lists else server.propose_script(PENDING_CODE, reason=f"w{i}")
        for i in range(waiters)
    ]
    answered: dict[int, float] = {}
    rejected: dict[int, float] = {}
    errors: list[str] = []

    def wait(proposal: dict) -> None:
        if lists:
            status, body = server.api("GET", f"/api/v1/proposals?since_id={probe['id']}&wait=60")
            if status == 200 and body["items"]:
                answered[len(answered)] = time.perf_counter()
            else:
                errors.append(f"{status} {body}")
            return
        status, body = server.api("GET", f"/api/v1/proposals/{proposal['id']}?wait=60")
        if status == 200 and body["status"] == "rejected":
            answered[proposal["id"]] = time.perf_counter()
        else:
            errors.append(f"{status} {body}")

    threads = [threading.Thread(target=wait, args=(p,)) for p in pending]
    for thread in threads:
        thread.start()
    time.sleep(2)  # every call is in its wait
    cpu_before, wall_before = cpu_seconds(pids), time.perf_counter()
    latencies = []
    for _ in range(reads):
        started = time.perf_counter()
        status, _ = server.api("GET", f"/api/v1/proposals/{probe['id']}")
        assert status == 200
        latencies.append(time.perf_counter() - started)
        time.sleep(0.1)
    cpu_share = (cpu_seconds(pids) - cpu_before) / (time.perf_counter() - wall_before)
    if lists:
        server.propose_script(PENDING_CODE, reason="the one they wait for")
        rejected = dict.fromkeys(range(waiters), time.perf_counter())
    for proposal in [] if lists else pending:
        server.api("POST", f"/api/v1/proposals/{proposal['id']}/reject", {"comment": "x"}, reviewer)
        rejected[proposal["id"]] = time.perf_counter()
    for thread in threads:
        thread.join()
    delays = [answered[pk] - rejected[pk] for pk in answered]
    return {
        "waiters": waiters,
        "cpu": cpu_share,
        "p50": statistics.median(latencies),
        "p95": percentile(latencies, 0.95),
        "answer_p50": statistics.median(delays) if delays else 0.0,
        "answer_max": max(delays, default=0.0),
        "missed": len(errors),
    }


def watcher_queries(server: Server, data_dir: str, lists: int, idle: float = 5.0) -> dict:
    """Statements on the watcher's thread with ``lists`` idle list calls: per tick over
    ``idle`` seconds, and in the tick that reads a new proposal (see the module's doc)."""
    for name in FOREIGN_ENV:
        os.environ.pop(name, None)
    os.environ.update(AIRLOCK_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="console.settings")
    import django

    django.setup()
    from channels.layers import get_channel_layer
    from django.db.backends.signals import connection_created

    from approvals.agents import waiting
    from approvals.agents.changes import Interest, marker
    from approvals.models import Agent

    counted = [0]  # statements run on the watcher's thread
    reads = []  # the watcher's reads at its ticks: (low, end, statements before, after)

    def trace(statement: str) -> None:
        if threading.current_thread().name.startswith("proposal-watcher"):
            counted[0] += 1

    def traced(sender, connection, **kwargs) -> None:
        connection.connection.set_trace_callback(trace)

    def changes_since(low: int):
        before = counted[0]
        end, found = real(low)
        reads.append((low, end, before, counted[0]))
        return end, found

    connection_created.connect(traced, weak=False)
    real, waiting.changes_since = waiting.changes_since, changes_since
    agent_token(data_dir, "bench-idle-lists", "script.execute")
    interest = Interest(Agent.objects.get(name="bench-idle-lists").pk, frozenset({"pending"}))

    async def count() -> dict:
        watcher = waiting.ProposalWatcher()
        watcher.linger = 0
        seen = await asyncio.to_thread(marker)
        calls = [
            asyncio.create_task(watcher.rows_may_appear(120, interest, seen)) for _ in range(lists)
        ]
        await asyncio.sleep(2)  # subscribed, its connection open
        start, ticks = counted[0], len(reads)
        await asyncio.sleep(idle)
        idle_statements, idle_ticks = counted[0] - start, len(reads) - ticks
        ticks = len(reads)
        await asyncio.to_thread(server.propose_script, PENDING_CODE, "none of them wants it")
        for _ in range(100):
            changed = [read for read in reads[ticks:] if read[1] > read[0]]
            if changed:
                break
            await asyncio.sleep(0.05)
        asleep = not any(call.done() for call in calls)
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        if watcher._task is not None:
            await asyncio.wait_for(watcher._task, 10)  # it ends with its last call
        poller = getattr(get_channel_layer(), "_poller", None)
        if poller is not None:  # nobody listens any more: it would end at its next read
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)
        return {
            "lists": lists,
            "idle_ticks": idle_ticks,
            "per_tick": idle_statements / idle_ticks if idle_ticks else None,
            "per_change": changed[0][3] - changed[0][2] if changed else None,
            "asleep": asleep,
        }

    return asyncio.run(count())


def answer(row: dict) -> str:
    if not row["waiters"]:
        return "—"
    return f"{row['answer_p50'] * 1000:.0f} / {row['answer_max'] * 1000:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiters", default="0,50,200")
    parser.add_argument("--reads", type=int, default=40)
    parser.add_argument("--lists", action="store_true", help="the calls wait on a list")
    parser.add_argument("--queries", action="store_true", help="with --lists: count queries")
    parser.add_argument("--json", help="also write the figures to this file, as JSON")
    args = parser.parse_args()
    if args.queries and not args.lists:
        parser.error("--queries counts the queries of waiting lists: give --lists too")
    counts = [int(n) for n in args.waiters.split(",")]
    with tempfile.TemporaryDirectory(prefix="airlock-bench-") as data_dir:
        server = start_server(Path(data_dir))
        try:
            reviewer = reviewer_token(data_dir)
            pids = server.web_processes()
            if not pids:
                raise RuntimeError("no web process under serve")
            rows = [measure(server, reviewer, pids, n, args.reads, args.lists) for n in counts]
            queries = watcher_queries(server, data_dir, max(counts)) if args.queries else None
        finally:
            server.stop()
    base = rows[0]
    waiting = "on the agent's list" if args.lists else "each on a pending proposal"
    print(f"reads={args.reads} (one every 100 ms while the waiters wait {waiting})")
    print(
        "| waiting calls | web CPU while waiting | read p50 ms | read p95 ms "
        "| p50 vs baseline | change → waiter answered p50 / max ms | waiters without the change |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['waiters']} | {row['cpu']:.0%} | {row['p50'] * 1000:.1f} "
            f"| {row['p95'] * 1000:.1f} | {row['p50'] / base['p50']:.2f}× "
            f"| {answer(row)} | {row['missed']} |"
        )
    if queries:
        print(
            f"\nthe watcher's statements with {queries['lists']} idle lists (counted in this "
            f"process): {queries['per_tick']} a tick over {queries['idle_ticks']} ticks; "
            f"{queries['per_change']} in the tick that read a new proposal; "
            f"{'all' if queries['asleep'] else 'not all'} of them still asleep after it"
        )
    write_json(
        args.json, {"lists": args.lists, "reads": args.reads, "rows": rows, "queries": queries}
    )


if __name__ == "__main__":
    main()
