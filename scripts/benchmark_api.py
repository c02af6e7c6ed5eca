#!/usr/bin/env python
"""Benchmark the API under bounded load, through a real embedded deployment.

Starts ``manage.py serve`` on a fresh data dir (local addresses only), then
keeps ``--clients`` keep-alive connections busy for ``--seconds`` each with:

- ``GET /livez``: a bare Django JSON view, the framework's floor on this
  server stack (no database, no authentication);
- ``GET /api/v1/proposals/{id}``: an authenticated read;
- ``POST /api/v1/proposals``: a script proposal that waits for review (so
  the worker stays idle and the row is the whole cost);
- the same with ``--consoles`` reviewers' consoles open on the queue
  (``/ws/queue/``), which every new proposal changes.

Prints requests/s, p50 and p95 per request kind, and each p50 against the
floor's, for every ``--web-processes`` value given (the same run, the same
machine).

``--lists 10000,1000000`` measures the list endpoints instead: for each size, a
fresh deployment whose table holds that many proposals (seeded in bulk, 1 % of
them pending, eleven risk scores, three actions, two agents), then one client
reads pages of 100 one after another: the newest, the pending queue by risk, a
page twenty cursors deep, filters on agent and action glob, a text search, and
the executions list; against the floor and a single proposal's read. Then
proposals created one after another, in blocks alternating between that
deployment and a second one of the same size without the text index: what
the index costs the write.

    .venv/bin/python scripts/benchmark_api.py [--clients 10] [--seconds 5] [--web-processes 1,2]
                                              [--consoles 2] [--scale] [--json PATH]
    .venv/bin/python scripts/benchmark_api.py --lists 10000,1000000 [--pages 200] [--scale]

``--scale`` runs on PostgreSQL + Redis (``--database-url``, ``--redis-url``: a fresh
database for each web process count, or each size of ``--lists``) instead of the
embedded SQLite. ``--json PATH`` also writes the figures to PATH as a JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import websockets  # noqa: E402

from scripts.benchmarking import lift_agent_limits, percentile, write_json  # noqa: E402
from tests.serving import (  # noqa: E402
    Server,
    manage,
    start_server,
    user_token,
)

CATCH_UP = "from approvals.models import Proposal; Proposal.text_index.catch_up()"

# Scores above the auto-approve threshold: the proposal waits for a person.
REVIEWED_CODE = "import subprocess\nsubprocess.run(['ls', '/'])\n"


@dataclass
class Load:
    """What ``--clients`` connections measured for one kind of request."""

    latencies: list[float] = field(default_factory=list)
    errors: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def figures(self) -> dict:
        """What the tables print of it (``--json``)."""
        return {
            "rate": self.rate if self.seconds else None,
            "p50_ms": statistics.median(self.latencies) * 1000,
            "p95_ms": percentile(self.latencies, 0.95) * 1000,
            "errors": {str(status): times for status, times in sorted(self.errors.items())},
        }


class Connection:
    """One HTTP/1.1 keep-alive connection: as little client work as a request can take."""

    def __init__(self, base: str, token: str):
        parts = urlsplit(base)
        self.host, self.port = parts.hostname, parts.port
        self.token = token

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        self.writer.close()

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        payload = await self.reader.readexactly(length)
        return int(status_line.split()[1]), payload


async def load(
    server: Server, method: str, path: str, body: dict | None, clients: int, seconds: float
) -> Load:
    data = json.dumps(body).encode() if body else b""
    result = Load()
    connections = [Connection(server.base, server.token) for _ in range(clients)]
    await asyncio.gather(*(c.open() for c in connections))
    deadline = time.perf_counter() + seconds

    async def client(connection: Connection) -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            status, _ = await connection.request(method, path, data)
            result.latencies.append(time.perf_counter() - started)
            if status >= 400:
                result.errors[status] = result.errors.get(status, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in connections))
    result.seconds = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return result


async def load_with_consoles(
    server: Server, token: str, consoles: int, body: dict, clients: int, seconds: float
) -> Load:
    """``load`` of creates while ``consoles`` reviewers watch the queue; each must get updates."""
    frames = [0] * consoles
    done = asyncio.Event()

    async def watch(index: int) -> None:
        async with websockets.connect(
            server.base.replace("http", "ws", 1) + "/ws/queue/",
            additional_headers={"Authorization": f"Bearer {token}", "Origin": server.base},
            max_size=None,
        ) as ws:
            await ws.recv()  # the snapshot
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ws.recv(), 0.2)
                    frames[index] += 1

    watchers = [asyncio.create_task(watch(i)) for i in range(consoles)]
    try:
        result = await load(server, "POST", "/api/v1/proposals", body, clients, seconds)
    finally:
        done.set()
        await asyncio.gather(*watchers)
    assert all(frames), f"a console got no update: {frames}"
    return result


def measure(
    web_processes: int, clients: int, seconds: float, consoles: int, scale: dict | None = None
) -> dict[str, Load]:
    create = {
        "action": "script.execute",
        "parameters": {"language": "python", "code": REVIEWED_CODE},
        "reason": "benchmark",
    }
    with tempfile.TemporaryDirectory(prefix="airlock-bench-") as data_dir:
        server = start_server(
            Path(data_dir), serve_args=["--web-processes", str(web_processes)], extra_env=scale
        )
        try:
            lift_agent_limits(data_dir, scale)
            status, proposal = server.api("POST", "/api/v1/proposals", create)
            assert status == 201 and proposal["status"] == "pending", proposal
            kinds = {
                "GET /livez (floor)": ("GET", "/livez", None),
                "GET /api/v1/proposals/{id}": ("GET", f"/api/v1/proposals/{proposal['id']}", None),
                "POST /api/v1/proposals": ("POST", "/api/v1/proposals", create),
            }
            results = {}
            for name, (method, path, body) in kinds.items():
                asyncio.run(load(server, method, path, body, clients, 1.0))  # warm every process
                results[name] = asyncio.run(load(server, method, path, body, clients, seconds))
            if consoles:
                token = user_token(data_dir, "reviewer", env=scale)
                results[f"POST /api/v1/proposals, {consoles} consoles open"] = asyncio.run(
                    load_with_consoles(server, token, consoles, create, clients, seconds)
                )
            return results
        finally:
            server.stop()


SEED_ROWS = """
    INSERT INTO approvals_proposal (action, parameters, summary, reason, urgency, status,
        risk_score, risk_reasons, decision_path, policy_version, required_approvals,
        approvals_count, created_at, updated_at, agent_id)
    SELECT
        CASE i % 3 WHEN 0 THEN 'script.execute' WHEN 1 THEN 'docker.run_container'
            ELSE 'host.restart_service' END,
        '{{}}', 'seeded proposal ' || i, 'benchmark row ' || i, 'normal',
        CASE WHEN i % 100 = 0 THEN 'pending' WHEN i % 7 = 0 THEN 'rejected'
            WHEN i % 5 = 0 THEN 'denied' ELSE 'approved' END,
        i % 11, '[]', '{{}}', 1, 1, 0, {moment}, {moment},
        CASE i % 2 WHEN 0 THEN {agents[0]} ELSE {agents[1]} END
    FROM {numbers}
"""
AGENTS = "SELECT id FROM approvals_agent ORDER BY id"
SECOND_AGENT = (
    "INSERT INTO approvals_agent (name, token_hash, token_hint, capabilities, is_active, "
    "created_at, paused_by, pause_reason, refused_paused, refused_pending, refused_rate) "
    "VALUES ('bench-bot', 'x', 'x', '[]', true, '2026-01-01 00:00:00+00', '', '', 0, 0, 0)"
)


class SQLiteTable:
    """The embedded deployment's proposals table: seeded in one statement; its text
    index's triggers taken away and put back."""

    name = "SQLite"

    def __init__(self, data_dir: Path):
        import sqlite3

        self.db = sqlite3.connect(data_dir / "airlock.sqlite3", timeout=60)
        self.triggers = self.db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
            "AND tbl_name = 'approvals_proposal' AND name LIKE '%_text_%'"
        ).fetchall()
        assert len(self.triggers) == 3, self.triggers

    def seed(self, count: int) -> None:
        with self.db:
            if len(self.db.execute(AGENTS).fetchall()) < 2:
                self.db.execute(SECOND_AGENT)
            agents = [row[0] for row in self.db.execute(AGENTS)]
            numbers = (
                f"(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                f"WHERE i < {count}) SELECT i FROM n)"
            )
            moment = "datetime('2026-01-01', '+' || i || ' seconds')"
            self.db.execute(SEED_ROWS.format(agents=agents, numbers=numbers, moment=moment))
            self.db.execute("ANALYZE")

    def settle(self) -> None:
        """The log of the seed's indexing written back, as a day's checkpoints would have."""
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def index(self, kept: bool) -> None:
        with self.db:
            for name, sql in self.triggers:
                self.db.execute(sql if kept else f'DROP TRIGGER "{name}"')

    def close(self) -> None:
        self.db.close()


class PostgresTable:
    """The scale deployment's proposals table: seeded from ``generate_series``; its
    trigram indexes dropped and built again."""

    name = "PostgreSQL"
    INDEXES = ("summary", "reason")

    def __init__(self, database_url: str):
        import psycopg

        self.db = psycopg.connect(database_url, autocommit=True)

    def seed(self, count: int) -> None:
        if len(self.db.execute(AGENTS).fetchall()) < 2:
            self.db.execute(SECOND_AGENT)
        agents = [row[0] for row in self.db.execute(AGENTS)]
        numbers = f"generate_series(1, {count}) AS i"
        moment = "timestamptz '2026-01-01 00:00:00+00' + i * interval '1 second'"
        self.db.execute(
            SEED_ROWS.format(agents=agents, numbers=numbers, moment=moment)
            .replace("'{}'", "'{}'::jsonb")
            .replace("'[]'", "'[]'::jsonb")
        )
        self.db.execute("VACUUM ANALYZE approvals_proposal")

    def settle(self) -> None:
        pass  # VACUUM ANALYZE after the seed

    def index(self, kept: bool) -> None:
        for column in self.INDEXES:
            name = f"approvals_proposal_{column}_trgm"
            self.db.execute(
                f"CREATE INDEX {name} ON approvals_proposal "
                f"USING gin (UPPER({column}::text) gin_trgm_ops)"
                if kept
                else f"DROP INDEX {name}"
            )

    def close(self) -> None:
        self.db.close()


@contextlib.contextmanager
def deployment(count: int, scale: dict | None, index: bool = True):
    """A served deployment whose table holds ``count`` proposals, with or without the
    text index; yields (server, its data dir, its table)."""
    with tempfile.TemporaryDirectory(prefix="airlock-bench-lists-") as data_dir:
        server = start_server(Path(data_dir), extra_env=scale)
        table = PostgresTable(scale["DATABASE_URL"]) if scale else SQLiteTable(Path(data_dir))
        try:
            lift_agent_limits(data_dir, scale)
            started = time.perf_counter()
            table.seed(count)
            if not index:
                table.index(False)
            print(
                f"  seeded {count:,} proposals in {time.perf_counter() - started:.1f} s"
                + ("" if index else ", text index taken away")
            )
            yield server, data_dir, table
        finally:
            table.close()
            server.stop()


def measure_lists(count: int, pages: int, scale: dict | None, bare: dict | None) -> dict[str, Load]:
    """Creates against a second deployment of the same size without the text index
    (``bare``: its database, on PostgreSQL), both fresh; then the list requests."""
    with deployment(count, scale) as (server, data_dir, table):
        token = user_token(data_dir, "reviewer", env=scale)
        manage(data_dir, "shell", "-c", CATCH_UP, env=scale)  # the periodic task's work, at once
        table.settle()
        with deployment(count, bare, index=False) as (without, _, _):
            creates = creates_with_and_without_text_index(server, without, pages)
        status, first = server.api("GET", "/api/v1/proposals?limit=100", token=token)
        assert status == 200 and len(first["items"]) == 100, first
        cursor = first["next_cursor"]
        for _ in range(19):
            _, page = server.api("GET", f"/api/v1/proposals?limit=100&cursor={cursor}", token=token)
            cursor = page["next_cursor"]
        kinds = {
            "GET /livez (floor)": "/livez",
            "GET /api/v1/proposals/{id}": f"/api/v1/proposals/{first['items'][0]['id']}",
            "newest 100": "/api/v1/proposals?limit=100",
            "pending queue, 100 by risk": "/api/v1/proposals?status=pending&limit=100",
            "21st page (cursor)": f"/api/v1/proposals?limit=100&cursor={cursor}",
            "agent + action glob": "/api/v1/proposals?limit=100&agent=bench-bot&action=docker.*",
            "risk high, rejected": "/api/v1/proposals?limit=100&risk=high&status=rejected",
            "text search, 111 rows match": "/api/v1/proposals?limit=100&q=row+4242",
            "text search, every row matches": "/api/v1/proposals?limit=100&q=benchmark",
            "text search, none match": "/api/v1/proposals?limit=100&q=no+such+text",
            "executions, newest 100": "/api/v1/executions?limit=100",
        }
        results = {}
        for name, path in kinds.items():
            results[name] = asyncio.run(sequential(server, token, path, pages))
        results["text search after 100 new proposals"] = asyncio.run(
            search_after_creates(server, token, max(pages // 5, 3))
        )
        results.update(creates)
        return results


async def search_after_creates(server: Server, token: str, count: int) -> Load:
    """A search that first indexes the hundred proposals created since the last one."""
    create = {"action": "script.execute", "reason": "benchmark fresh",
              "parameters": {"language": "python", "code": REVIEWED_CODE}}  # fmt: skip
    result = Load()
    for _ in range(count):
        await sequential(server, server.token, "/api/v1/proposals", 100, create)
        result.latencies += (
            await sequential(server, token, "/api/v1/proposals?limit=100&q=fresh", 1, warm=0)
        ).latencies
    return result


def creates_with_and_without_text_index(kept: Server, away: Server, count: int) -> dict[str, Load]:
    """What the text index costs a proposal's creation: creates one after another, in
    blocks on two deployments of the same size, one with the index and one without
    (no schema change while measuring: that alone slows the next statements)."""
    create = {"action": "script.execute", "reason": "benchmark",
              "parameters": {"language": "python", "code": REVIEWED_CODE}}  # fmt: skip
    on, off = "create (pending), text index", "create (pending), no text index"
    results = {on: Load(), off: Load()}
    blocks = [on, off] * 12
    random.Random(7).shuffle(blocks)  # no side always at the same moment
    for block in blocks:
        server = kept if block == on else away
        measured = asyncio.run(
            sequential(server, server.token, "/api/v1/proposals", max(count // 3, 5), create)
        )
        results[block].latencies += measured.latencies
        for status, times in measured.errors.items():
            results[block].errors[status] = results[block].errors.get(status, 0) + times
    return results


async def sequential(
    server: Server, token: str, path: str, count: int, body: dict | None = None, warm: int = 5
) -> Load:
    """``count`` requests to ``path`` (GET, or POST of ``body``) one after another on
    one connection (after ``warm`` of them, not measured)."""
    connection = Connection(server.base, token)
    await connection.open()
    method, data = ("POST", json.dumps(body).encode()) if body else ("GET", b"")
    result = Load()
    for _ in range(warm):
        await connection.request(method, path, data)
    started = time.perf_counter()
    for _ in range(count):
        began = time.perf_counter()
        status, _ = await connection.request(method, path, data)
        result.latencies.append(time.perf_counter() - began)
        if status >= 400:
            result.errors[status] = result.errors.get(status, 0) + 1
    result.seconds = time.perf_counter() - started
    connection.close()
    return result


def print_lists(sizes: list[int], pages: int, scale: dict | None, bare: dict | None) -> dict:
    database = "PostgreSQL + Redis" if scale else "SQLite"
    print(f"pages of 100, {pages} reads each, one client; {database}; cores={os.cpu_count()}")
    print("| proposals | request | p50 ms | p95 ms | p50 vs floor | errors |")
    print("|---|---|---|---|---|---|")
    figures = {}
    for size in sizes:
        results = measure_lists(size, pages, scale, bare)
        figures[str(size)] = {name: result.figures() for name, result in results.items()}
        floor = statistics.median(next(iter(results.values())).latencies)
        for name, result in results.items():
            p50 = statistics.median(result.latencies)
            p95 = percentile(result.latencies, 0.95)
            errors = ", ".join(f"{k}×{v}" for k, v in sorted(result.errors.items())) or "0"
            print(
                f"| {size:,} | {name} | {p50 * 1000:.1f} | {p95 * 1000:.1f} | "
                f"{p50 / floor:.1f}× | {errors} |"
            )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--web-processes",
        default=f"1,{os.cpu_count()}",
        help="comma-separated web process counts to compare (default: 1 and the cores)",
    )
    parser.add_argument(
        "--consoles", type=int, default=2, help="reviewers' consoles open for the last row"
    )
    parser.add_argument(
        "--lists",
        help="comma-separated table sizes: measure the list endpoints at each instead",
    )
    parser.add_argument("--pages", type=int, default=200, help="reads per list request")
    parser.add_argument("--scale", action="store_true", help="PostgreSQL + Redis")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--json", help="also write the figures to this file, as JSON")
    args = parser.parse_args()
    from scripts.benchmark_execution import scale_env

    database = "PostgreSQL + Redis" if args.scale else "SQLite"
    if args.lists:
        sizes = [int(n) for n in args.lists.split(",")]
        if not args.scale:
            figures = print_lists(sizes, args.pages, None, None)
        else:
            figures = {}
            for size in sizes:  # fresh databases each
                with (
                    scale_env(args.database_url, args.redis_url, "_lists") as env,
                    scale_env(args.database_url, args.redis_url, "_lists_bare") as bare,
                ):
                    figures.update(print_lists([size], args.pages, env, bare))
        write_json(args.json, {"database": database, "pages": args.pages, "lists": figures})
        return
    counts = sorted({int(n) for n in args.web_processes.split(",")})
    print(
        f"clients={args.clients} seconds={args.seconds} cores={os.cpu_count()}"
        + (f" database={database}" if args.scale else "")
    )
    print("| web processes | request | req/s | p50 ms | p95 ms | p50 vs floor | errors |")
    print("|---|---|---|---|---|---|---|")
    figures = {}
    for count in counts:
        with contextlib.ExitStack() as stack:
            scale = None
            if args.scale:  # a fresh database each
                scale = stack.enter_context(
                    scale_env(args.database_url, args.redis_url, f"_load_{count}")
                )
            results = measure(count, args.clients, args.seconds, args.consoles, scale)
        figures[str(count)] = {name: result.figures() for name, result in results.items()}
        floor = statistics.median(next(iter(results.values())).latencies)
        for name, result in results.items():
            p50 = statistics.median(result.latencies)
            p95 = percentile(result.latencies, 0.95)
            errors = ", ".join(f"{k}×{v}" for k, v in sorted(result.errors.items())) or "0"
            print(
                f"| {count} | {name} | {result.rate:.0f} | {p50 * 1000:.1f} | "
                f"{p95 * 1000:.1f} | {p50 / floor:.1f}× | {errors} |"
            )
    write_json(args.json, {
        "database": database, "clients": args.clients, "seconds": args.seconds,
        "web_processes": figures,
    })  # fmt: skip


if __name__ == "__main__":
    main()
