#!/usr/bin/env python
"""Benchmark the console and the API at a year of history: page times by the size of it.

For each size in ``--sizes``, a fresh embedded data dir seeded with
``manage.py seed_history`` (proposals spread over a year, with decisions,
executions, output and the audit chain), then, in this process through
Django's test client as a signed-in admin: each page
``--runs`` times (after one warm-up), its p50 and p95 and its query count
(an admin's console session and personal API token);
``verify_audit``'s rate on the whole chain; a retention pass over output
older than 30 days; a backup. Prints one table per size, and each page's
p95 against the smallest size's (the goal: within 2x at 10^6 of 10^4).
With ``--postgres URL`` (a server's address, e.g. ``postgres://postgres@127.0.0.1:5432``)
each size gets a fresh database ``airlock_bench_history_<size>`` there instead,
dropped afterwards.

    .venv/bin/python scripts/benchmark_history.py [--sizes 10000,100000,1000000] [--runs 20]
        [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarking import percentile  # noqa: E402

PAGES = [
    ("queue", "/queue/"),
    ("history", "/history/"),
    ("history, filtered", "/history/?status=approved&action=script.execute&agent=seed-agent-1"),
    ("history, page 20", "/history/?page=20"),
    ("overview", "/overview/"),
    ("a proposal", "/proposals/{proposal}/"),
    ("audit trail", "/manage/audit/"),
    ("API: proposals list", "/api/v1/proposals?limit=100"),
    ("API: pending by risk", "/api/v1/proposals?status=pending&limit=100"),
    ("API: a proposal", "/api/v1/proposals/{proposal}"),
    ("API: executions list", "/api/v1/executions?limit=100"),
]


def measure_size(size: int, runs: int, postgres: str | None) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix=f"airlock-bench-history-{size}-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SQLITE_PATH")}
    env["AIRLOCK_DATA_DIR"] = str(data_dir)
    if postgres:
        env["DATABASE_URL"] = fresh_database(postgres, f"airlock_bench_history_{size}")
        env["SECRET_KEY"] = f"airlock-bench-history-{os.getpid()}"
    try:
        return measured(size, runs, env, data_dir)
    finally:
        if postgres:
            fresh_database(postgres, f"airlock_bench_history_{size}", drop_only=True)


def fresh_database(server: str, name: str, drop_only: bool = False) -> str:
    """An empty database ``name`` on ``server`` (dropped first if there); its URL."""
    import psycopg

    with psycopg.connect(f"{server.rstrip('/')}/postgres", autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            db.execute(f'CREATE DATABASE "{name}"')
    return f"{server.rstrip('/')}/{name}"


def measured(size: int, runs: int, env: dict, data_dir: Path) -> dict:
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True)
    started = time.monotonic()
    subprocess.run([*manage, "seed_history", str(size)], env=env, check=True, capture_output=True)
    seeded = time.monotonic() - started
    done = subprocess.run(
        [sys.executable, __file__, "--pages", str(runs)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"measuring the pages failed:\n{done.stderr[-3000:]}")
    said = done.stdout
    rows = [line.split("\t") for line in said.strip().splitlines()]
    timed = {}
    for what, command in (
        ("verify_audit", ["verify_audit"]),
        ("retention pass (30 days)", ["retention", "--days", "30"]),
        ("backup", ["backup", str(data_dir / "backup")]),
    ):
        started = time.monotonic()
        done = subprocess.run([*manage, *command], env=env, capture_output=True, text=True)
        timed[what] = (time.monotonic() - started, done.stdout.strip().splitlines()[-1:])
    return {"seeded": seeded, "pages": rows, "timed": timed}


def pages(runs: int) -> None:
    """In the seeded deployment: each page's p50, p95 (ms) and query count, tab-separated."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from approvals.core.tokens import create_user_token
    from approvals.models import Proposal
    from tests.conftest import with_fresh_factor

    admin = get_user_model().objects.create_superuser("bench-admin", password="x" * 20)
    console = Client(HTTP_HOST="localhost")
    console.force_login(admin)
    console = with_fresh_factor(console, admin)
    token = create_user_token(admin)
    api = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {token}")
    proposal = Proposal.objects.order_by("-pk").values_list("pk", flat=True)[500]
    for name, path in PAGES:
        path = path.format(proposal=proposal)
        client = api if path.startswith("/api/") else console
        response = client.get(path)  # warm-up
        assert response.status_code == 200, (path, response.status_code)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            client.get(path)
            times.append((time.perf_counter() - started) * 1000)
        with CaptureQueriesContext(connection) as queries:
            client.get(path)
        print(
            f"{name}\t{percentile(times, 0.5):.1f}\t{percentile(times, 0.95):.1f}\t{len(queries)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--postgres", help="a PostgreSQL server's URL (default: SQLite)")
    parser.add_argument("--pages", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pages:
        return pages(args.pages)
    sizes = [int(size) for size in args.sizes.split(",")]
    results = {size: measure_size(size, args.runs, args.postgres) for size in sizes}
    smallest = results[sizes[0]]["pages"]
    for size in sizes:
        result = results[size]
        where = "PostgreSQL" if args.postgres else "SQLite"
        print(f"\n### {size:,} proposals, {where} (seeded in {result['seeded']:.0f} s)\n")
        print(f"| page | p50 ms | p95 ms | queries | p95 vs {sizes[0]:,} |")
        print("|---|---|---|---|---|")
        for (name, p50, p95, queries), base in zip(result["pages"], smallest, strict=True):
            ratio = float(p95) / float(base[2])
            print(f"| {name} | {p50} | {p95} | {queries} | {ratio:.2f}x |")
        print()
        for what, (seconds, said) in result["timed"].items():
            print(f"- {what}: {seconds:.1f} s ({' '.join(said)})")


if __name__ == "__main__":
    main()
