#!/usr/bin/env python
"""Every goal of the performance work in one command: each figure beside its goal and its
baseline, all measured in the same run.

Runs the benchmark scripts one after another (never two at once: they share the
CPUs), each with ``--json`` into a temporary directory, then prints one markdown
table on standard output (what runs, on standard error): per figure, the goal,
the baseline measured in the same run, the figure, how it compares with the
baseline (a ratio; for a goal of "+ 5 ms", the difference too) and whether the
goal is met. The goals are the only numbers in this file: every figure comes
from the scripts' runs. Latencies are p50s unless the goal says otherwise.

- ``sandbox``: ``benchmark_process_costs.py`` over the backends that work here
  (``print(1)`` back to back through each, beside ``/usr/bin/python3 -I -S -c
  'print(1)'`` spawned on the host: gVisor within 2×, docker 1.2×, local 1×),
  then ``benchmark_execution.py`` per backend (proposal → result in one call,
  the result inline, within the sandbox run alone + 5 ms);
- ``api``: ``benchmark_api.py``, 2 web processes, 10 clients: reads within
  1.3× the floor (``GET /livez``), creates at 1,000/s with p95 within 25 ms
  (SQLite), 800/s with two consoles open; then ``--scale``: 1,000/s on PostgreSQL;
- ``waiters``: ``benchmark_long_poll.py --lists --queries``, a thousand idle
  list calls: at most 1 query a tick for all of them, 2 for a change (the
  statements of the long-poll watcher, counted by that script in its own process);
- ``retention``: ``benchmark_retention.py``, the first pass over a year at 10^6
  proposals within 60 s, the hot path's worst write during it within 30 ms;
- ``stream``: ``benchmark_stream.py --mib 64``: long lines to a websocket
  client at 100 MB/s;
- ``compose``: ``benchmark_scale.py --backends docker,gvisor``: proposal →
  result in the compose deployment and embedded beside it, within the sandbox
  run (straight on the engine) + 5 ms.

A backend or part whose prerequisites are missing (no Docker engine, no runsc,
no PostgreSQL or Redis, no docker compose) gets rows that say "not run" and why;
a script that fails puts its error in its rows, and the others go on. Exit
status 1 when a script failed (a goal not met is a figure, not a failure).

The whole run (hours: the retention part seeds 10^6 proposals first; the
compose part builds its images if they are missing):

    .venv/bin/python scripts/benchmark_goals.py [--keep DIR]

``--only`` runs some parts (``--only sandbox,api,waiters,retention,stream,compose``).
``--quick`` takes tiny sizes (5 runs, 1 s of load, 2,000 proposals, 4 MiB, 20
waiters, 10 compose runs): a smoke run of the command, whose figures say
nothing about the goals. ``--keep DIR`` keeps each script's output and JSON there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("sandbox", "api", "waiters", "retention", "stream", "compose")
BACKENDS = ("local", "docker", "gvisor")
# Goal 1: a sandbox run back to back within this many bare spawns.
SPAWNS = {"gvisor": 2.0, "docker": 1.2, "local": 1.0}
OVER_SANDBOX_MS = 5.0  # goals 2 and 7: proposal → result within the sandbox run + this
TIMEOUT = {"retention": 4 * 3600, "compose": 3 * 3600}  # seconds a script may take
DEFAULT_TIMEOUT = 3600
# The rows of the scripts' JSON that the goals read.
BACK_TO_BACK = "`print(1)` through the backend, back to back"
BARE_SPAWN = "spawn `python3 -I -S -c 'print(1)'` on the host, back to back (the baseline)"
FLOOR, READ, CREATE = "GET /livez (floor)", "GET /api/v1/proposals/{id}", "POST /api/v1/proposals"
CONSOLES = "POST /api/v1/proposals, 2 consoles open"
LONG_LINES = "long lines (64 KiB)"
PROBES = """
import json, django
django.setup()
from executions.sandboxes import backend_class
found = {}
for name in ("local", "docker", "gvisor"):
    try:
        availability = backend_class(name).probe()
        found[name] = None if availability.ok else availability.reason or "unavailable"
    except Exception as exc:
        found[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Sizes:
    runs: int  # sandbox runs per path (process costs, proposal → result)
    seconds: float  # of load per API request kind
    waiters: int
    reads: int
    proposals: int  # the retention pass's history
    writer_seconds: float | None  # the retention writer's baseline (None: the script's own)
    mib: int
    stream_runs: int
    compose_runs: int


FULL = Sizes(30, 5, 1000, 40, 1_000_000, None, 64, 3, 60)
QUICK = Sizes(5, 1, 20, 5, 2000, 1, 4, 1, 10)


@dataclass
class Row:
    goal: str  # its number in the list of goals
    what: str
    target: str
    baseline: str = "—"
    measured: str = "—"
    versus: str = "—"
    verdict: str = ""


class Failed(Exception):
    """A script that exited with an error, or wrote figures the goals cannot read."""


def ms(value: float) -> str:
    return f"{value:.1f} ms"


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base else "—"


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def errors_of(load: dict) -> str:
    return ", ".join(f"{status}×{times}" for status, times in load["errors"].items())


class Goals:
    def __init__(self, args: argparse.Namespace, work: Path):
        self.args = args
        self.sizes = QUICK if args.quick else FULL
        self.work = work
        self.results: dict[tuple, dict | Exception] = {}
        self.failed = False
        self._probes: dict[str, str | None] | None = None

    # --- running the scripts --------------------------------------------------------

    def script(self, part: str, name: str, *argv: str, own_tmp: bool = False) -> dict:
        """The JSON of ``scripts/name argv``, run once (the rows that need it share it)."""
        key = (name, *argv)
        if key not in self.results:
            try:
                self.results[key] = self._run(part, name, list(argv), own_tmp)
            except Exception as exc:
                self.results[key] = exc
        result = self.results[key]
        if isinstance(result, Exception):
            raise result
        return result

    def _run(self, part: str, name: str, argv: list[str], own_tmp: bool) -> dict:
        index = len(self.results)
        output = self.work / f"{index:02d}-{Path(name).stem}.json"
        log = self.work / f"{index:02d}-{Path(name).stem}.log"
        command = [sys.executable, str(ROOT / "scripts" / name), *argv, "--json", str(output)]
        shown = " ".join(["scripts/" + name, *argv])
        print(f"[goals] {part}: {shown}", file=sys.stderr, flush=True)
        env = dict(os.environ)
        scratch = None
        if own_tmp:  # what the script leaves in the temporary directory goes with it
            scratch = tempfile.mkdtemp(prefix="airlock-goals-tmp-")
            env["TMPDIR"] = scratch
        started = time.monotonic()
        timeout = TIMEOUT.get(part, DEFAULT_TIMEOUT)
        try:
            with open(log, "wb") as out:
                process = subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
                try:
                    code = process.wait(timeout)
                except subprocess.TimeoutExpired:
                    stop(process)
                    raise Failed(f"{shown}: no result in {timeout} s, stopped") from None
                except BaseException:  # interrupted: the script's session ends with this one
                    stop(process)
                    raise
        finally:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        took = time.monotonic() - started
        text = log.read_text(errors="replace")
        if code != 0:
            tail = "\n".join(text.splitlines()[-15:])
            print(f"[goals] {shown} exited {code} after {took:.0f} s:\n{tail}", file=sys.stderr)
            raise Failed(f"{shown} exited {code}: {last_error(text)}")
        print(f"[goals] done in {took:.0f} s", file=sys.stderr, flush=True)
        try:
            return json.loads(output.read_text())
        except (OSError, ValueError) as exc:
            raise Failed(f"{shown} wrote no figures: {exc}") from None

    # --- prerequisites -------------------------------------------------------------

    def probes(self) -> dict[str, str | None]:
        """Why each sandbox backend cannot run here (None: it can), as the backends say."""
        if self._probes is None:
            with tempfile.TemporaryDirectory(prefix="airlock-goals-probe-") as data_dir:
                env = {**os.environ, "AIRLOCK_DATA_DIR": data_dir}
                env.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
                done = subprocess.run(
                    [sys.executable, "-c", PROBES], cwd=ROOT, env=env, capture_output=True,
                    text=True, timeout=120,
                )  # fmt: skip
            if done.returncode:
                reason = f"the backends' probe failed: {last_error(done.stderr)}"
                self._probes = dict.fromkeys(BACKENDS, reason)
            else:
                self._probes = json.loads(done.stdout.strip().splitlines()[-1])
        return self._probes

    def missing_scale(self) -> str | None:
        """Why the scale deployment's parts cannot be used (None: they can)."""
        try:
            import psycopg
            import redis

            psycopg.connect(self.args.database_url, connect_timeout=5).close()
            redis.Redis.from_url(self.args.redis_url, socket_timeout=5).ping()
        except Exception as exc:
            return (
                f"no PostgreSQL or Redis ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
            )
        return None

    def missing_compose(self) -> str | None:
        if self.probes()["docker"]:
            return f"the docker backend cannot run here ({self.probes()['docker']})"
        for command in (["docker", "compose", "version"], ["docker-compose", "--version"]):
            if (
                shutil.which(command[0])
                and not subprocess.run(command, capture_output=True).returncode
            ):
                return None
        return "neither `docker compose` nor docker-compose is installed"

    # --- rows ----------------------------------------------------------------------

    def row(self, spec: tuple[str, str, str], measure: Callable[[], tuple], missing=None) -> Row:
        """A row of ``spec`` (goal, what, target) from ``measure()``: (baseline, figure,
        versus, met); or why it was not run, or how it failed."""
        if missing:
            return Row(*spec, verdict=f"not run: {missing}")
        try:
            baseline, measured, versus, ok = measure()
            return Row(*spec, baseline, measured, versus, met(ok))
        except Exception as exc:
            self.failed = True
            text = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
            return Row(*spec, verdict=f"failed: {text}")

    def sandbox(self) -> list[Row]:
        probes = self.probes()
        working = [b for b in BACKENDS if probes[b] is None]
        runs = str(self.sizes.runs)

        def back_to_back(backend: str) -> tuple:
            medians = self.script(
                "sandbox", "benchmark_process_costs.py", "--backends", ",".join(working),
                "--runs", runs,
            )["medians_ms"]  # fmt: skip
            run, bare = medians[BACK_TO_BACK][backend], medians[BARE_SPAWN][backend]
            limit = SPAWNS[backend] * bare
            return f"bare spawn {ms(bare)}", ms(run), ratio(run, bare), run <= limit

        def proposal_to_result(backend: str) -> tuple:
            data = self.script(
                "sandbox", "benchmark_execution.py", "--backend", backend, "--runs", runs
            )
            alone = data["sandbox"]["p50_ms"]
            total = data["proposal_to_result"]["this checkout"]["p50_ms"]
            versus = f"{total - alone:+.1f} ms ({ratio(total, alone)})"
            return f"sandbox run {ms(alone)}", ms(total), versus, total <= alone + OVER_SANDBOX_MS

        rows = [
            self.row(
                ("1", f"sandbox run back to back, {b}", f"≤ {SPAWNS[b]:g}× the bare spawn"),
                lambda b=b: back_to_back(b),
                probes[b],
            )  # fmt: skip
            for b in BACKENDS
        ]
        spec = "proposal → result (one call, result inline), {}"
        rows += [
            self.row(
                ("2", spec.format(b), f"≤ sandbox run + {OVER_SANDBOX_MS:g} ms"),
                lambda b=b: proposal_to_result(b),
                probes[b],
            )  # fmt: skip
            for b in BACKENDS
        ]
        return rows

    def api(self) -> list[Row]:
        load = ["--clients", "10", "--seconds", f"{self.sizes.seconds:g}", "--web-processes", "2"]

        def sqlite() -> dict:
            return self.script("api", "benchmark_api.py", *load, "--consoles", "2")[
                "web_processes"
            ]["2"]

        def postgres() -> dict:
            return self.script(
                "api", "benchmark_api.py", *load, "--consoles", "0", "--scale",
                "--database-url", self.args.database_url, "--redis-url", self.args.redis_url,
            )["web_processes"]["2"]  # fmt: skip

        def reads() -> tuple:
            floor, read = sqlite()[FLOOR], sqlite()[READ]
            ok = read["p50_ms"] <= 1.3 * floor["p50_ms"] and not read["errors"]
            return (
                f"floor p50 {ms(floor['p50_ms'])}",
                figure(read, "p50_ms"),
                ratio(read["p50_ms"], floor["p50_ms"]),
                ok,
            )

        def rate(loads: Callable[[], dict], name: str, base: str, least: float) -> tuple:
            figures = loads()
            measured, baseline = figures[name], figures[base]
            label = "floor" if base == FLOOR else "creates, no console open,"
            ok = measured["rate"] >= least and not measured["errors"]
            return (
                f"{label} {baseline['rate']:,.0f}/s",
                figure(measured, "rate"),
                ratio(measured["rate"], baseline["rate"]),
                ok,
            )

        def create_p95() -> tuple:
            floor, create = sqlite()[FLOOR], sqlite()[CREATE]
            ok = create["p95_ms"] <= 25 and not create["errors"]
            return (
                f"floor p95 {ms(floor['p95_ms'])}",
                figure(create, "p95_ms"),
                ratio(create["p95_ms"], floor["p95_ms"]),
                ok,
            )

        web = "2 web processes"
        return [
            self.row(("3", f"API read p50, {web}, SQLite", "≤ 1.3× the floor's p50"), reads),
            self.row(
                ("3", f"creates, {web}, SQLite", "≥ 1,000/s"),
                lambda: rate(sqlite, CREATE, FLOOR, 1000),
            ),
            self.row(("3", f"create p95, {web}, SQLite", "≤ 25 ms"), create_p95),
            self.row(
                ("3", f"creates with two consoles open, {web}, SQLite", "≥ 800/s"),
                lambda: rate(sqlite, CONSOLES, CREATE, 800),
            ),
            self.row(
                ("3", f"creates, {web}, PostgreSQL + Redis", "≥ 1,000/s"),
                lambda: rate(postgres, CREATE, FLOOR, 1000),
                self.missing_scale(),
            ),  # fmt: skip
        ]

    def waiters(self) -> list[Row]:
        n = self.sizes.waiters

        def queries() -> dict:
            data = self.script(
                "waiters", "benchmark_long_poll.py", "--lists", "--queries",
                "--waiters", f"0,{n}", "--reads", str(self.sizes.reads),
            )["queries"]  # fmt: skip
            if not data["idle_ticks"] or data["per_change"] is None:
                raise Failed(f"the watcher read no tick or no change: {data}")
            if not data["per_tick"] or not data["per_change"]:  # a read is at least one
                raise Failed(f"no statement of the watcher was counted: {data}")
            return data

        def per_tick() -> tuple:
            q = queries()
            return "—", f"{q['per_tick']:.2f} over {q['idle_ticks']} ticks", "—", q["per_tick"] <= 1

        def per_change() -> tuple:
            q = queries()
            woken = "" if q["asleep"] else " (some lists woke: not idle)"
            return "—", f"{q['per_change']}{woken}", "—", q["per_change"] <= 2 and q["asleep"]

        what = f"{n:,} idle list waiters: queries"
        return [
            self.row(("4", f"{what} per tick, in total", "≤ 1"), per_tick),
            self.row(("4", f"{what} per change", "≤ 2"), per_change),
        ]

    def retention(self) -> list[Row]:
        sizes = self.sizes
        argv = ["--executions", "0", "--proposals", str(sizes.proposals), "--history-days", "365"]
        argv += ["--audit-days", "none"]
        if sizes.writer_seconds is not None:
            argv += ["--seconds", f"{sizes.writer_seconds:g}"]

        def data() -> dict:
            return self.script("retention", "benchmark_retention.py", *argv, own_tmp=True)

        def took() -> tuple:
            seconds = data()["pass_seconds"]
            return "—", f"{seconds:.1f} s", "—", seconds <= 60

        def worst() -> tuple:
            writes = data()["writes"]
            alone, during = writes["alone"]["worst_ms"], writes["during_pass"]["worst_ms"]
            return f"worst write alone {ms(alone)}", ms(during), ratio(during, alone), during <= 30

        year = f"a year at {sizes.proposals:,} proposals"
        return [
            self.row(("5", f"first retention pass over {year}", "≤ 60 s"), took),
            self.row(("5", "the hot path's worst write during that pass", "≤ 30 ms"), worst),
        ]

    def stream(self) -> list[Row]:
        def long_lines() -> tuple:
            data = self.script(
                "stream", "benchmark_stream.py", "--mib", str(self.sizes.mib),
                "--runs", str(self.sizes.stream_runs),
            )["throughput_mb_s"][LONG_LINES]  # fmt: skip
            alone, via = data["sandbox_alone"], data["websocket"]
            return (
                f"sandbox alone {alone:.0f} MB/s",
                f"{via:.0f} MB/s",
                ratio(via, alone),
                via >= 100,
            )

        what = f"output stream to a websocket client, {LONG_LINES}, {self.sizes.mib} MiB"
        return [self.row(("6", what, "≥ 100 MB/s"), long_lines)]

    def compose(self) -> list[Row]:
        missing = self.missing_compose()
        probes = self.probes()
        working = [b for b in ("docker", "gvisor") if probes[b] is None]

        def measured(backend: str, place: str) -> tuple:
            data = self.script(
                "compose", "benchmark_scale.py", "--backends", ",".join(working),
                "--runs", str(self.sizes.compose_runs),
            )["backends"][backend]  # fmt: skip
            alone = data["sandbox run, engine"]["run_p50_ms"]
            total = data[place]["proposal_to_result_p50_ms"]
            versus = f"{total - alone:+.1f} ms ({ratio(total, alone)})"
            return f"sandbox run {ms(alone)}", ms(total), versus, total <= alone + OVER_SANDBOX_MS

        target = f"≤ sandbox run + {OVER_SANDBOX_MS:g} ms"
        return [
            self.row(
                ("7", f"{place}, {b}: proposal → result (one call)", target),
                lambda b=b, place=place: measured(b, place),
                missing or probes[b],
            )  # fmt: skip
            for b in ("docker", "gvisor")
            for place in ("compose", "embedded")
        ]


def figure(load: dict, key: str) -> str:
    value = f"{load[key]:,.0f}/s" if key == "rate" else ms(load[key])
    errors = errors_of(load)
    return f"{value} (errors: {errors})" if errors else value


def last_error(text: str) -> str:
    """The line of a script's output that says what went wrong (the exception's, if any)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)]
    return ((raised or lines or ["no output"])[-1])[:300]


def stop(process: subprocess.Popen) -> None:
    """End a script that ran too long, and what it started in its session."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
            process.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[Row], quick: bool) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sizes = "quick sizes (a smoke run: not the goals' sizes)" if quick else "the goals' sizes"
    lines = [
        f"Performance goals, {when}, {os.cpu_count()} CPUs, {sizes}; "
        f"load average at the end {os.getloadavg()[0]:.1f}",
        "",
        "| # | figure | goal | baseline (same run) | measured | vs baseline | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = (row.goal, row.what, row.target, row.baseline, row.measured, row.versus)
        lines.append("| " + " | ".join(cell(c) for c in (*cells, row.verdict)) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts to run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--keep", type=Path, help="keep each script's output and JSON here")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    args = parser.parse_args()
    parts = [part.strip() for part in args.only.split(",") if part.strip()]
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts {sorted(unknown)}: choose from {', '.join(PARTS)}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="airlock-goals-"))
    work.mkdir(parents=True, exist_ok=True)
    goals = Goals(args, work)
    rows: list[Row] = []
    try:
        for part in PARTS:
            if part in parts:
                rows += getattr(goals, part)()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows, args.quick))
    return 1 if goals.failed else 0


if __name__ == "__main__":
    sys.exit(main())
