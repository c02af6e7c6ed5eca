#!/usr/bin/env python3
"""Load on the scale deployment: N agents proposing and long-polling, per stack size.

    .venv/bin/python scripts/benchmark_scale.py [--agents 20] [--seconds 60] [--sizes 1x1,2x1,1x3,2x3]

Starts the compose deployment (``docker/stack up``, as root, a project of its
own on a free local port) at each size WEBxWORKERS in turn. For each, N agent
threads propose a small Python script (approved by policy), long-poll
(``?wait=30&until=finished``) until its run ends, and propose again, for the given seconds;
then every run still going is waited for (up to 120 s). Prints proposals/s,
results/s, decision latency (proposal sent → approval seen) and result
latency (proposal sent → final status seen) p50/p95, and lost (runs that
ended ``lost`` or never ended: must be 0); then the ratios 2 web / 1 web and
3 workers / 1 worker. Only 127.0.0.1 and the stack's own containers are
touched; ``docker/stack down`` at the end.

    .venv/bin/python scripts/benchmark_scale.py --backends docker,gvisor [--runs 60]

compares container sandboxes in compose (the workers start them through the
Docker gate) with the same backend embedded (``manage.py serve`` on the engine's
own socket), in alternating blocks of ten in the same minutes: proposal →
result and the run itself (the execution's ``duration_ms``), p50 and p95, one
agent at a time on a 1-web, 1-worker stack. Beside them, the proxy alone: the
same keep-alive sandbox run in this process straight on the engine and through
a gate process (``python -m dockergate``); it may add at most 10% to the p50.

``--json PATH`` also writes the figures to PATH as a JSON object (latencies in ms).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # benchmarking imports tests.serving
sys.path.insert(0, str(ROOT / "scripts"))
from benchmarking import percentile, write_json  # noqa: E402

STACK = ROOT / "docker" / "stack"
TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "lost"}
DRAIN_SECONDS = 120


@dataclass
class Sample:
    decision: float
    result: float | None  # None: never ended
    status: str


@dataclass
class Run:
    size: str
    seconds: float
    samples: list[Sample] = field(default_factory=list)
    errors: int = 0

    @property
    def lost(self) -> int:
        return sum(1 for s in self.samples if s.result is None or s.status == "lost")

    def rate(self, finished: bool = False) -> float:
        done = [s for s in self.samples if not finished or s.result is not None]
        return len(done) / self.seconds


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stack(env: dict, *args: str) -> str:
    result = subprocess.run(
        [str(STACK), *args], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if result.returncode:
        sys.exit(f"docker/stack {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def agent_token(env: dict) -> str:
    web = f"{env['COMPOSE_PROJECT_NAME']}_web_1"
    name = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    return subprocess.run(
        ["docker", "exec", web, "python", "manage.py", "create_agent", name, "--capability",
         "script.execute"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def agent_loop(url: str, token: str, deadline: float, run: Run, lock: threading.Lock) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    body = {"action": "script.execute", "parameters": {"language": "python", "code": "print(1)"}}
    while time.monotonic() < deadline:
        sent = time.monotonic()
        try:
            response = session.post(f"{url}/api/v1/proposals", json=body, timeout=60)
        except requests.RequestException:
            with lock:
                run.errors += 1
            continue
        if response.status_code != 201:
            with lock:
                run.errors += 1
            continue
        seen = response.json()
        decided = time.monotonic() - sent
        give_up = max(deadline, time.monotonic()) + DRAIN_SECONDS
        while seen["execution_status"] not in TERMINAL and time.monotonic() < give_up:
            try:
                answer = session.get(
                    f"{url}/api/v1/proposals/{seen['id']}?wait=30&until=finished", timeout=45
                )
            except requests.RequestException:
                continue
            if answer.status_code == 200:
                seen = answer.json()
        ended = seen["execution_status"] in TERMINAL
        sample = Sample(
            decided, time.monotonic() - sent if ended else None, seen["execution_status"]
        )
        with lock:
            run.samples.append(sample)


def measure(env: dict, size: str, agents: int, seconds: float) -> Run:
    web, workers = size.split("x")
    print(f"[bench] {size}: docker/stack up --web {web} --workers {workers}", flush=True)
    stack(env, "up", "--web", web, "--workers", workers)
    url = f"http://127.0.0.1:{env['AIRLOCK_PORT']}"
    token = agent_token(env)
    run, lock = Run(size, seconds), threading.Lock()
    deadline = time.monotonic() + seconds
    threads = [
        threading.Thread(target=agent_loop, args=(url, token, deadline, run, lock))
        for _ in range(agents)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return run


def figures(run: Run) -> dict:
    decisions = [s.decision * 1000 for s in run.samples] or [0.0]
    results = [s.result * 1000 for s in run.samples if s.result is not None] or [0.0]
    return {
        "proposals_per_s": run.rate(), "results_per_s": run.rate(finished=True),
        "decision_p50_ms": percentile(decisions, 0.5), "decision_p95_ms": percentile(decisions, 0.95),
        "result_p50_ms": percentile(results, 0.5), "result_p95_ms": percentile(results, 0.95),
        "lost": run.lost, "errors": run.errors,
    }  # fmt: skip


def row(run: Run) -> str:
    f = figures(run)
    web, workers = run.size.split("x")
    return (
        f"| {web} | {workers} | {f['proposals_per_s']:.1f} | {f['results_per_s']:.1f} "
        f"| {f['decision_p50_ms']:.0f} | {f['decision_p95_ms']:.0f} "
        f"| {f['result_p50_ms']:.0f} | {f['result_p95_ms']:.0f} "
        f"| {run.lost} | {run.errors} |"
    )


# --- container sandboxes: compose (through the gate) beside embedded ------------------


def timed_proposal(url: str, token: str) -> tuple[float, float]:
    """(seconds from the POST to the result in hand, the run's own seconds)."""
    headers = {"Authorization": f"Bearer {token}"}
    body = {"action": "script.execute", "parameters": {"language": "python", "code": "print(1)"}}
    started = time.perf_counter()
    seen = requests.post(
        f"{url}/api/v1/proposals?wait=10&until=finished", json=body, headers=headers, timeout=60
    ).json()
    while seen.get("execution_status") not in TERMINAL:
        seen = requests.get(
            f"{url}/api/v1/proposals/{seen['id']}?wait=10&until=finished",
            headers=headers,
            timeout=60,
        ).json()
    result = (
        seen.get("result")
        or requests.get(
            f"{url}/api/v1/executions/{seen['execution_id']}", headers=headers, timeout=60
        ).json()
    )
    elapsed = time.perf_counter() - started
    assert result["stdout"] == "1\n", result
    return elapsed, result["duration_ms"] / 1000


def gate_process(port: int) -> subprocess.Popen:
    env = {**os.environ, "DOCKER_GATE_LISTEN": f"127.0.0.1:{port}", "LOG_LEVEL": "WARNING"}
    process = subprocess.Popen([sys.executable, "-m", "dockergate"], cwd=ROOT, env=env)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.1)
    process.kill()
    sys.exit("the gate did not listen")


def sandbox_runs(backend: str, runs: int) -> dict[str, list[float]]:
    """The same keep-alive run straight on the engine and through a gate, in blocks of ten."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    import docker

    from executions.sandboxes.base import Limits, MemorySink, RunRequest
    from executions.sandboxes.docker import DockerSandbox
    from executions.sandboxes.gvisor import GVisorSandbox

    cls = GVisorSandbox if backend == "gvisor" else DockerSandbox
    port = free_port()
    gate = gate_process(port)
    sandboxes = {
        "engine": cls(mode="keepalive"),
        "gate": cls(
            mode="keepalive", client=docker.DockerClient(base_url=f"tcp://127.0.0.1:{port}")
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in sandboxes}
    try:
        for sandbox in sandboxes.values():
            sandbox.run(RunRequest("python", "print(1)", Limits()), MemorySink())  # warm
        for block in range(0, runs, 10):
            for name in sorted(sandboxes, reverse=bool(block % 20)):
                for _ in range(min(10, runs - block)):
                    started = time.perf_counter()
                    sandboxes[name].run(RunRequest("python", "print(1)", Limits()), MemorySink())
                    times[name].append(time.perf_counter() - started)
    finally:
        for sandbox in sandboxes.values():
            sandbox.close()
        gate.terminate()
        gate.wait(10)
    return times


def compare_backends(
    env: dict, backends: list[str], runs: int, measured: dict | None = None
) -> list[str]:
    """The table's lines; ``measured`` (when given) gets the same figures by backend."""
    sys.path.insert(0, str(ROOT))
    import tempfile

    from tests.serving import start_server

    lines = []
    for backend in backends:
        print(
            f"[bench] {backend}: compose 1x1 and embedded serve, {runs} proposals each", flush=True
        )
        stack({**env, "SANDBOX_BACKEND": backend}, "up", "--web", "1", "--workers", "1")
        url = f"http://127.0.0.1:{env['AIRLOCK_PORT']}"
        token = agent_token(env)
        with tempfile.TemporaryDirectory(prefix="airlock-bench-") as data_dir:
            server = start_server(Path(data_dir), backend=backend, verbose=False)
            try:
                places = {"compose": (url, token), "embedded": (server.base, server.token)}
                samples: dict[str, list[tuple[float, float]]] = {name: [] for name in places}
                for place in places.values():
                    timed_proposal(*place)  # a warm pool on each side
                for block in range(0, runs, 10):
                    for name in sorted(places, reverse=bool(block % 20)):
                        samples[name] += [
                            timed_proposal(*places[name]) for _ in range(min(10, runs - block))
                        ]
            finally:
                server.stop()
        proxy = sandbox_runs(backend, runs)
        figures = {} if measured is None else measured.setdefault(backend, {})
        for name, values in samples.items():
            total = [v[0] * 1000 for v in values]
            run_ms = [v[1] * 1000 for v in values]
            figures[name] = {
                "proposal_to_result_p50_ms": percentile(total, 0.5),
                "proposal_to_result_p95_ms": percentile(total, 0.95),
                "run_p50_ms": percentile(run_ms, 0.5), "run_p95_ms": percentile(run_ms, 0.95),
            }  # fmt: skip
            lines.append(
                f"| {backend} | {name} | {percentile(total, 0.5):.0f} | {percentile(total, 0.95):.0f} "
                f"| {percentile(run_ms, 0.5):.1f} | {percentile(run_ms, 0.95):.1f} |"
            )
        for name, values in proxy.items():
            ms = [v * 1000 for v in values]
            figures[f"sandbox run, {name}"] = {
                "run_p50_ms": percentile(ms, 0.5),
                "run_p95_ms": percentile(ms, 0.95),
            }
            where = (
                "sandbox run, straight on the engine"
                if name == "engine"
                else "sandbox run, through the gate"
            )
            lines.append(
                f"| {backend} | {where} | — | — | {percentile(ms, 0.5):.1f} | {percentile(ms, 0.95):.1f} |"
            )
        ratio = percentile(proxy["gate"], 0.5) / percentile(proxy["engine"], 0.5)
        compose_ratio = percentile([v[1] for v in samples["compose"]], 0.5) / percentile(
            [v[1] for v in samples["embedded"]], 0.5
        )
        figures.update(gate_over_engine=ratio, compose_over_embedded_run=compose_ratio)
        lines.append(
            f"| {backend} | gate / engine, run p50: **{ratio:.2f}** ({'within' if ratio <= 1.10 else 'OVER'} 10%); "
            f"compose / embedded, run p50: {compose_ratio:.2f} | | | | |"
        )
        print("\n".join(lines[-5:]), flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--sizes", default="1x1,2x1,1x3,2x3", help="WEBxWORKERS, comma-separated")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--backends", default="", help="docker,gvisor: compose beside embedded")
    parser.add_argument("--runs", type=int, default=60, help="proposals per place (--backends)")
    parser.add_argument("--json", help="also write the figures to this file, as JSON")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if set(backends) - {"docker", "gvisor"} or not 10 <= args.runs <= 1000:
        parser.error("--backends takes docker and/or gvisor; --runs 10-1000")
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    for size in sizes:
        web, _, workers = size.partition("x")
        if not (web.isdigit() and int(web) >= 1 and workers in ("1", "2", "3")):
            parser.error(f"a size is WEBxWORKERS with WEB >= 1 and WORKERS 1-3, got {size!r}")
    if not 1 <= args.agents <= 500 or not 5 <= args.seconds <= 600:
        parser.error("--agents wants 1-500 and --seconds 5-600")
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": f"airlockbench{os.getpid()}",
        "AIRLOCK_PORT": str(free_port()),
        "AIRLOCK_BIND": "127.0.0.1",
    }
    if backends:
        measured: dict = {}
        try:
            lines = compare_backends(env, backends, args.runs, measured)
        finally:
            if not args.keep:
                stack(env, "down")
        print(
            f"\n{args.runs} proposals per place, one at a time; ms\n\n"
            "| backend | where | proposal → result p50 | p95 | run p50 | run p95 |\n"
            "|---|---|---|---|---|---|"
        )
        print("\n".join(lines))
        write_json(args.json, {"runs": args.runs, "backends": measured})
        return 0
    runs = []
    try:
        for size in sizes:
            runs.append(measure(env, size, args.agents, args.seconds))
            print(row(runs[-1]), flush=True)
    finally:
        if not args.keep:
            stack(env, "down")
    print(
        f"\n{args.agents} agents, {args.seconds:g} s per size; latencies in ms\n\n"
        "| web | workers | proposals/s | results/s | decision p50 | decision p95 "
        "| result p50 | result p95 | lost | errors |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    for run in runs:
        print(row(run))
    by_size = {run.size: run for run in runs}
    print()
    for label, wider, narrower in (
        ("2 web / 1 web (1 worker)", "2x1", "1x1"),
        ("2 web / 1 web (3 workers)", "2x3", "1x3"),
        ("3 workers / 1 worker (1 web)", "1x3", "1x1"),
        ("3 workers / 1 worker (2 web)", "2x3", "2x1"),
    ):
        if wider in by_size and narrower in by_size and by_size[narrower].rate(True):
            ratio = by_size[wider].rate(True) / by_size[narrower].rate(True)
            print(f"- results/s {label}: {ratio:.2f}")
    lost = sum(run.lost for run in runs)
    print(f"\nlost = {lost}")
    write_json(args.json, {
        "agents": args.agents, "seconds": args.seconds,
        "sizes": {run.size: figures(run) for run in runs},
    })  # fmt: skip
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
