#!/usr/bin/env python
"""Benchmark a retention pass against the hot path's writes, on the embedded SQLite.

A fresh data dir holds ``--executions`` finished executions of ``--chunks``
output chunks each, finished 40 days ago (seeded in bulk), and a history of
``--proposals`` proposals over 120 days (``seed_history``: decisions,
executions, audit records). A writer process appends output as a running
execution does (a chunk and an audit record per transaction, one after
another) for ``--seconds`` alone (the baseline), then while ``manage.py
backup`` copies the database, then for the whole of a pass of ``manage.py
retention --days 30 --audit-days 30`` (``--audit-days none``: audit records
stay), which archives and deletes what is older: output, then proposals, then
audit records, with the search index's periodic task beside it (which waits
for the pass to end; the writes are measured after it too, until the index
has dropped what the pass deleted). Prints the writer's p50, p99 and worst latency in each phase,
and how long the pass took. The processes run as under ``serve`` (its
checkpointer beside them, the writers with only a backstop). The goals: the first pass over a year at 10^6
proposals within 60 s, no write of the hot path stalled more than 30 ms by
it (``--executions 0 --proposals 1000000 --history-days 365 --audit-days none``).

    .venv/bin/python scripts/benchmark_retention.py [--executions 2000] [--chunks 50]
        [--proposals 20000] [--history-days 120] [--audit-days 30|none] [--seconds 8]
        [--json PATH]

``--json PATH`` also writes the figures to PATH as a JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarking import percentile, write_json  # noqa: E402

from infrastructure.sqlite.checkpoints import BACKSTOP_PAGES, Checkpointer  # noqa: E402


def _django(data_dir: Path) -> None:
    os.environ["AIRLOCK_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()


def seed(executions: int, chunks: int) -> None:
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from executions.models import Execution, OutputChunk

    finished = timezone.now() - timedelta(days=40)
    with transaction.atomic():
        made = Execution.objects.bulk_create(
            Execution(
                action="script.execute",
                command_hash="0" * 64,
                status="succeeded",
                finished_at=finished + timedelta(seconds=n),
            )
            for n in range(executions)
        )
    for start in range(0, len(made), 200):
        with transaction.atomic():
            OutputChunk.objects.bulk_create(
                OutputChunk(execution=e, seq=s + 1, stream="stdout", data=f"line {s}: " + "x" * 80)
                for e in made[start : start + 200]
                for s in range(chunks)
            )


def writer(seconds: float) -> None:
    """Append output as a running execution does, one transaction per chunk: latencies (ms).
    For ``seconds``, or (0) until standard input ends."""
    import threading

    from django.db import transaction

    from audit.services import record
    from executions.models import Execution, OutputChunk

    execution = Execution.objects.create(
        action="script.execute", command_hash="1" * 64, status="running"
    )
    stop = threading.Event()
    if seconds > 0:
        threading.Timer(seconds, stop.set).start()
    else:
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    latencies, seq = [], 0
    while not stop.is_set():
        seq += 1
        started = time.perf_counter()
        with transaction.atomic():
            OutputChunk.objects.create(execution=execution, seq=seq, stream="stdout", data="x\n")
            record("system", "benchmark.write", execution, seq=seq)
        latencies.append((time.perf_counter() - started) * 1000)
        time.sleep(0.002)
    print(json.dumps(latencies))


class Indexing:
    """The search index's periodic task, as the worker runs it beside the pass: a catch-up of
    up to 8 s every 10 s (``approvals.tasks.index_text``), on a thread of its own."""

    def __init__(self):
        import threading

        self.rows, self.last, self._stop = 0, time.monotonic(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Indexing:
        self._thread.start()
        return self

    def _run(self) -> None:
        from approvals.retention.tasks import index_text

        while True:
            tick = time.monotonic()
            done = index_text()
            if done:
                self.rows, self.last = self.rows + done, time.monotonic()
            elif self._stop.is_set():
                return
            time.sleep(max(0.0, 10.0 - (time.monotonic() - tick)))

    def finish(self) -> float:
        """When the index last had work, once the pass is over (monotonic)."""
        self._stop.set()
        self._thread.join()
        return self.last


def _write_for(data_dir: Path, seconds: float) -> subprocess.Popen:
    """A writer for ``seconds``, or (0) until ``communicate()`` closes its input."""
    return subprocess.Popen(
        [sys.executable, __file__, "--writer", str(seconds), "--data-dir", str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _row(name: str, latencies: list[float]) -> str:
    return (
        f"| {name} | {len(latencies)} | {percentile(latencies, 0.5):.2f} | "
        f"{percentile(latencies, 0.99):.2f} | {max(latencies):.1f} |"
    )


def _figures(latencies: list[float]) -> dict:
    return {
        "n": len(latencies),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "worst_ms": max(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--proposals", type=int, default=20000)
    parser.add_argument("--history-days", type=int, default=120)
    parser.add_argument("--audit-days", default="30", help="days of audit records kept, or none")
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--json", help="also write the figures to this file, as JSON")
    parser.add_argument("--writer", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer is not None:
        _django(Path(args.data_dir))
        return writer(args.writer)

    data_dir = Path(tempfile.mkdtemp(prefix="airlock-bench-retention-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SQLITE_PATH")}
    env["AIRLOCK_DATA_DIR"] = str(data_dir)
    # The processes run as under ``serve``: its checkpointer copies the log back, and the
    # writers (the web processes, the worker that runs retention) keep only a backstop.
    env["SQLITE_WAL_AUTOCHECKPOINT"] = os.environ["SQLITE_WAL_AUTOCHECKPOINT"] = str(BACKSTOP_PAGES)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True)
    _django(data_dir)
    started = time.monotonic()
    seed(args.executions, args.chunks)
    subprocess.run(
        [*manage, "seed_history", str(args.proposals), "--days", str(args.history_days)],
        env=env, check=True,
        capture_output=True,
    )  # fmt: skip
    total = args.executions * args.chunks
    print(
        f"seeded {args.executions} executions, {total} chunks in {time.monotonic() - started:.1f} s"
    )

    checkpoints = Checkpointer(str(data_dir / "airlock.sqlite3")).start()
    alone = _write_for(data_dir, args.seconds)
    baseline = json.loads(alone.communicate()[0])

    copying = _write_for(data_dir, args.seconds)
    time.sleep(0.5)
    started = time.monotonic()
    subprocess.run(
        [*manage, "backup", str(data_dir / "backup")], env=env, check=True, capture_output=True
    )
    backup_took = time.monotonic() - started
    backed_up = json.loads(copying.communicate()[0])

    during = _write_for(data_dir, 0)
    time.sleep(0.5)
    indexing = Indexing().start()
    started = time.monotonic()
    audit = [] if args.audit_days == "none" else ["--audit-days", args.audit_days]
    done = subprocess.run(
        [*manage, "retention", "--days", "30", *audit],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    took = time.monotonic() - started
    loaded = json.loads(during.communicate()[0])
    after = _write_for(data_dir, 0)
    caught_up = max(0.0, indexing.finish() - started - took)
    indexed = json.loads(after.communicate()[0])
    checkpoints.stop()

    print()
    print("| writes (a chunk and an audit record each) | n | p50 ms | p99 ms | worst ms |")
    print("|---|---|---|---|---|")
    print(_row("alone (baseline)", baseline))
    print(_row("while retention archives and deletes", loaded))
    print(_row("then while the search index drops what it deleted", indexed))
    print(_row("while a backup copies the database", backed_up))
    print()
    print(
        f"seeded: {total} chunks of {args.executions} chatty executions and a history of "
        f"{args.proposals} proposals over {args.history_days} days; the pass took {took:.1f} s "
        f"(the command's start "
        f"included); worst write {max(loaded):.1f} ms against {max(baseline):.1f} ms alone, "
        f"p99 {percentile(loaded, 0.99) / percentile(baseline, 0.99):.2f}x; the search index "
        f"caught up with the pass's deletes {caught_up:.1f} s after it ({indexing.rows} rows; "
        f"worst write meanwhile {max(indexed):.1f} ms)"
    )
    for line in done.stdout.strip().splitlines():
        print(f"- {line}")
    print(
        f"backup: {backup_took:.1f} s; worst write {max(backed_up):.1f} ms, "
        f"p99 {percentile(backed_up, 0.99) / percentile(baseline, 0.99):.2f}x"
    )
    write_json(args.json, {
        "executions": args.executions, "chunks": total, "proposals": args.proposals,
        "history_days": args.history_days, "audit_days": args.audit_days,
        "pass_seconds": took, "index_caught_up_seconds": caught_up, "index_rows": indexing.rows,
        "backup_seconds": backup_took, "retention_output": done.stdout.strip().splitlines(),
        "writes": {
            "alone": _figures(baseline), "during_pass": _figures(loaded),
            "while_index_drops": _figures(indexed), "during_backup": _figures(backed_up),
        },
    })  # fmt: skip


if __name__ == "__main__":
    main()
