#!/usr/bin/env python3
"""Measure ``print(1)`` latency of every sandbox backend and mode on this host.

    .venv/bin/python scripts/benchmark_sandboxes.py [--runs 50] [--output docs/benchmarks.md]

Beside the backends it measures, in the same run, a bare interpreter spawn
(``python3 -I -S -c pass``) and the Docker CLI (``docker run --rm`` and
``docker exec`` into a warm container, runc and runsc), so the ratios compare
like with like. Prints a table and writes it to docs/benchmarks.md. Backends
that cannot run here are listed with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from executions.sandboxes import backend_class  # noqa: E402
from executions.sandboxes.base import MemorySink, RunRequest  # noqa: E402

WARMUP = 3
GAP = 0.1  # seconds between runs, outside the timing: separate requests are not back to back


@dataclass
class Row:
    """One measured configuration (or why it could not be measured)."""

    name: str
    samples: list[float]
    note: str = ""

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p95(self) -> float:
        ordered = sorted(self.samples)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


SECTION_START = "<!-- benchmark_sandboxes.py: start -->"
SECTION_END = "<!-- benchmark_sandboxes.py: end -->"


def measure(fn: Callable[[], None], runs: int, warmup: int = WARMUP) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        time.sleep(GAP)
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def system_python() -> str:
    # Debian's interpreter, as in the sandbox image; a pyenv shim would measure bash.
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def run_quietly(argv: list[str]) -> None:
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}… failed: {done.stderr.decode()[-300:]}")


def bare_spawn(runs: int) -> Row:
    argv = [system_python(), "-I", "-S", "-c", "pass"]
    return Row("bare `python3 -I -S -c pass`", measure(lambda: run_quietly(argv), runs))


def backend_row(name: str, backend: str, kwargs: dict, runs: int) -> Row:
    try:
        cls = backend_class(backend)
        availability = cls.probe()
        if not availability.ok:
            return Row(name, [], f"unavailable: {availability.reason}")
        sandbox = cls(**kwargs)
    except Exception as exc:  # report the reason instead of stopping the whole benchmark
        return Row(name, [], f"unavailable: {exc}")
    request = RunRequest("python", "print(1)")

    def once() -> None:
        sink = MemorySink()
        outcome = sandbox.run(request, sink)
        if not outcome.success or sink.stdout != "1\n":
            raise RuntimeError(f"{name}: {outcome} {sink.stdout!r} {sink.stderr[-300:]!r}")

    try:
        return Row(name, measure(once, runs))
    except RuntimeError as exc:
        return Row(name, [], f"failed: {str(exc)[:300]}")
    finally:
        sandbox.close()


def docker_cli_rows(runs: int, runtime: str | None) -> list[Row]:
    if (
        not shutil.which("docker")
        or subprocess.run(["docker", "info"], capture_output=True).returncode
    ):
        return [Row("docker CLI", [], "unavailable: no Docker engine answers")]
    image = settings.SANDBOX_IMAGE
    label = f" ({runtime})" if runtime else ""
    runtime_args = [f"--runtime={runtime}"] if runtime else []
    code = ["python3", "-I", "-S", "-c", "print(1)"]
    run_argv = ["docker", "run", "--rm", "--network", "none", *runtime_args, image, *code]
    rows = [Row(f"`docker run --rm`{label}", measure(lambda: run_quietly(run_argv), runs, 1))]
    started = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--network",
            "none",
            *runtime_args,
            "--entrypoint",
            "sleep",
            image,
            "3600",
        ],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        rows.append(Row(f"`docker exec`{label}", [], f"unavailable: {started.stderr.strip()}"))
        return rows
    container = started.stdout.strip()
    try:
        exec_argv = ["docker", "exec", container, *code]
        rows.append(Row(f"`docker exec`{label}", measure(lambda: run_quietly(exec_argv), runs)))
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)
    return rows


# The local backend's confinement methods, strongest first (see executions/sandboxes/local).
LOCAL_ROWS = {
    "bwrap": "local + bubblewrap",
    "unshare": "local + own namespaces (no bubblewrap)",
    "landlock": "local + Landlock only",
    "rlimits": "local, rlimits only (weak)",
}
USER_SUFFIX = ", ordinary user"


def local_rows(runs: int, methods=LOCAL_ROWS) -> list[Row]:
    return [backend_row(LOCAL_ROWS[m], "local", {"method": m}, runs) for m in methods]


def ordinary_user_rows(runs: int) -> list[Row]:
    """The methods a non-root user gets without bubblewrap, measured as that user."""
    if os.geteuid() != 0:
        return []
    argv = [os.path.join(ROOT, "scripts", "unprivileged"), "--hide", "bwrap", "--"]
    from tests.serving import USER_PYTHON

    argv += [USER_PYTHON, os.path.abspath(__file__), "--runs", str(runs), "--user-rows"]
    data_dir = os.path.join(tempfile.gettempdir(), f"airlock-bench-{os.getpid()}")  # theirs
    env = {**os.environ, "AIRLOCK_DATA_DIR": data_dir}
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        return [Row(f"local{USER_SUFFIX}", [], f"failed: {done.stderr.strip()[-300:]}")]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return [Row(name + USER_SUFFIX, samples, note) for name, samples, note in found]


def collect(runs: int) -> list[Row]:
    rows = [bare_spawn(runs)]
    rows += local_rows(runs)
    rows += ordinary_user_rows(runs)
    rows += docker_cli_rows(runs, None)
    rows.append(backend_row("docker one-shot", "docker", {"mode": "oneshot"}, runs))
    rows.append(backend_row("docker keep-alive", "docker", {"mode": "keepalive"}, runs))
    gvisor = backend_class("gvisor").probe()
    if gvisor.ok:
        rows += docker_cli_rows(runs, "runsc")
    rows.append(backend_row("gvisor one-shot", "gvisor", {"mode": "oneshot"}, runs))
    rows.append(backend_row("gvisor keep-alive", "gvisor", {"mode": "keepalive"}, runs))
    return rows


def table(rows: list[Row], runs: int) -> str:
    bare = rows[0].p50
    lines = [
        "| what | runs | p50 ms | p95 ms | p50 / bare spawn |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        if not row.samples:
            lines.append(f"| {row.name} | – | – | – | {row.note} |")
            continue
        lines.append(
            f"| {row.name} | {len(row.samples)} | {row.p50:.1f} | {row.p95:.1f} | {row.p50 / bare:.2f}× |"
        )
    return "\n".join(lines)


def targets(rows: list[Row]) -> list[str]:
    by_name = {row.name: row for row in rows if row.samples}
    bare = rows[0].p50
    checks = []

    def check(label: str, row_name: str, limit: float, reference: str) -> None:
        row = by_name.get(row_name)
        if row is None:
            checks.append(f"- {label}: not measured here")
            return
        verdict = "met" if row.p50 <= limit else "MISSED"
        checks.append(f"- {label}: {row.p50:.1f} ms vs {limit:.1f} ms ({reference}) — {verdict}")

    check("docker keep-alive within 2× a bare spawn", "docker keep-alive", 2 * bare, "2× bare")
    check("gvisor keep-alive within 2× a bare spawn", "gvisor keep-alive", 2 * bare, "2× bare")
    for method, name in LOCAL_ROWS.items():
        if method == "rlimits":
            continue  # the weak fallback has no target
        for row_name in (name, name + USER_SUFFIX):
            if row_name == name or row_name in by_name:  # user rows exist only as root
                check(f"{row_name} within 1.5× a bare spawn", row_name, 1.5 * bare, "1.5×")
    docker_run = by_name.get("`docker run --rm`")
    if docker_run:
        check(
            "docker one-shot no slower than `docker run --rm`",
            "docker one-shot",
            docker_run.p50,
            "docker run --rm",
        )
    gvisor_run = by_name.get("`docker run --rm` (runsc)")
    if gvisor_run:
        check(
            "gvisor one-shot no slower than `docker run --rm --runtime=runsc`",
            "gvisor one-shot",
            gvisor_run.p50,
            "docker run --rm, runsc",
        )
    return checks


def host_line() -> str:
    docker_version = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True
    ).stdout.strip()
    return (
        f"{platform.node()}, Linux {platform.release()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, Docker {docker_version or 'absent'}, "
        f"image {settings.SANDBOX_IMAGE}"
    )


def render(rows: list[Row], runs: int) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            "# Sandbox benchmark",
            "",
            f"`print(1)` in Python, {runs} runs per row after {WARMUP} warm-up runs, "
            f"{GAP * 1000:.0f} ms apart, measured end to end from the caller ({when}).",
            f"Load average at the end: {os.getloadavg()[0]:.1f} (the host was shared).",
            f"Host: {host_line()}.",
            "Produced by `scripts/benchmark_sandboxes.py`; rerun it to refresh this page.",
            "",
            table(rows, runs),
            "",
            "Targets:",
            "",
            *targets(rows),
            "",
            "Notes:",
            "",
            "- The Docker backends talk to a resident runner (PID 1 of each container) over",
            "  the attached stdin/stdout: no `docker exec` per run. After each run's clean-up",
            "  and report the runner pre-starts the next Python interpreter, which waits for",
            "  its code; the gap between runs is what lets it finish starting. (Forking it",
            "  before the report cost gVisor about 14 ms a run.)",
            "- One-shot: a fresh container per run. The backend starts the next run's",
            "  container (a spare no run has touched) as soon as a run takes one, and removes",
            "  used containers in the background.",
            "- gVisor keep-alive reuses containers like runc; a run there can open the",
            "  runner's descriptors through /proc, so every end-of-run report carries a",
            "  per-run nonce and anything else recycles the container (see gvisor.py).",
            "- Local runs: each run takes a Python started ahead of time for its limits",
            "  (inside its confinement) and a replacement starts in the background; the",
            "  supervisor of a run without bubblewrap exits as soon as the code's processes",
            "  are gone. Rows marked 'ordinary user' ran as a non-root user with bubblewrap",
            "  hidden (`scripts/unprivileged --hide bwrap`), as most people run Airlock.",
            "- Each row is one sequential client on a shared 2-CPU host: compare rows of",
            "  the same run, not absolute numbers across runs.",
            "",
        ]
    )


def main() -> None:
    global GAP
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=50, help="runs per row (at least 50 for the record)"
    )
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    parser.add_argument("--gap", type=float, default=GAP, help="seconds between runs")
    parser.add_argument("--user-rows", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    GAP = args.gap
    if args.user_rows:  # the child run as an ordinary user: rows as JSON, nothing written
        rows = local_rows(args.runs, ("unshare", "landlock"))
        print(json.dumps([[row.name, row.samples, row.note] for row in rows]))
        return
    rows = collect(args.runs)
    page = render(rows, args.runs)
    print(page)
    write_section(args.output, page)
    print(f"written to {args.output}")


def write_section(path: str, page: str) -> None:
    """Replace this benchmark's section of the page, keeping the other benchmarks' sections."""
    section = f"{SECTION_START}\n{page.rstrip()}\n{SECTION_END}\n"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        text = ""
    if SECTION_START in text and SECTION_END in text:
        before, rest = text.split(SECTION_START, 1)
        after = rest.split(SECTION_END, 1)[1].lstrip("\n")
        text = before + section + ("\n" + after if after else "")
    else:
        text = section + ("\n" + text if text else "")
    with open(path, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
