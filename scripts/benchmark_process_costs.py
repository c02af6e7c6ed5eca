#!/usr/bin/env python
"""Where a container sandbox's run goes: process costs inside the container, per backend.

For each backend (``docker``, ``gvisor``), one run of a probe inside a warm
container times what a run is made of — a fork of a Python process, a spawn
(``posix_spawn``) of ``/bin/true`` and of ``python3 -I -S``, a fork and exec
of the same, and a fork of a booted interpreter that has imported nothing —
then ``print(1)`` through the backend, back to back and 0.3 s apart, and right after
them the baseline: ``/usr/bin/python3 -I -S -c 'print(1)'`` spawned on the host, back
to back. Medians. ``local`` may be named too (its column is a run of the local backend).

    .venv/bin/python scripts/benchmark_process_costs.py [--backends docker,gvisor] [--runs 30]
                                                        [--json PATH]

``--json PATH`` also writes the medians (ms) to PATH as a JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarking import run_in_sandbox, write_json  # noqa: E402

PROBE = r"""
import json, os, statistics, time
PY = ["python3", "-I", "-S", "-c", "pass"]
def median_ms(f, n=15):
    times = []
    for _ in range(n):
        start = time.perf_counter(); f(); times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)
def fork_exit():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
def spawn(argv):
    return lambda: os.waitpid(os.posix_spawnp(argv[0], argv, dict(os.environ)), 0)
def fork_exec():
    pid = os.fork()
    if pid == 0:
        os.execvp(PY[0], PY)
    os.waitpid(pid, 0)
ZYGOTE = ("import os, sys\nr, w = int(sys.argv[1]), int(sys.argv[2])\nwhile os.read(r, 1):\n"
          "    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
          "    os.waitpid(pid, 0)\n    os.write(w, b'k')\n")
ask_r, ask_w = os.pipe(); done_r, done_w = os.pipe()
os.set_inheritable(ask_r, True); os.set_inheritable(done_w, True)
os.posix_spawnp("python3", ["python3", "-I", "-S", "-c", ZYGOTE, str(ask_r), str(done_w)], dict(os.environ))
time.sleep(0.3)
def zygote_fork():
    os.write(ask_w, b"g"); os.read(done_r, 1)
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
print(json.dumps({
    "fork of this Python process, exit": median_ms(fork_exit),
    "(its resident memory, MB)": rss / 1024,
    "spawn /bin/true": median_ms(spawn(["/bin/true"])),
    "spawn python3 -I -S -c pass": median_ms(spawn(PY)),
    "fork, exec python3 -I -S -c pass": median_ms(fork_exec),
    "fork of a booted python3 -I -S that imported nothing": median_ms(zygote_fork),
}))
os.close(ask_w)
"""


def runs_ms(backend: str, runs: int, gap: float) -> float:
    times = []
    for _ in range(runs):
        time.sleep(gap)
        start = time.perf_counter()
        run_in_sandbox(backend, "print(1)")
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


# Debian's interpreter, as in the sandbox image (scripts/benchmark_sandboxes.py: system_python).
BARE_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
BARE_SPAWN = "spawn `python3 -I -S -c 'print(1)'` on the host, back to back (the baseline)"


def bare_spawn_ms(runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([BARE_PYTHON, "-I", "-S", "-c", "print(1)"], capture_output=True)
        times.append((time.perf_counter() - start) * 1000)
        assert done.stdout == b"1\n", done
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="docker,gvisor")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", help="also write the medians to this file, as JSON")
    args = parser.parse_args()
    backends = args.backends.split(",")
    rows: dict[str, dict[str, float]] = {}
    for backend in backends:
        for _ in range(3):
            run_in_sandbox(backend, "pass")  # warm: the container and its prestarted interpreter
        for what, ms in json.loads(run_in_sandbox(backend, PROBE).stdout).items():
            rows.setdefault(what, {})[backend] = ms
        rows.setdefault("`print(1)` through the backend, back to back", {})[backend] = runs_ms(
            backend, args.runs, 0
        )
        rows.setdefault("`print(1)` through the backend, 0.3 s apart", {})[backend] = runs_ms(
            backend, args.runs, 0.3
        )
        rows.setdefault(BARE_SPAWN, {})[backend] = bare_spawn_ms(args.runs)
    print("| inside a warm container | " + " | ".join(f"{b} p50 ms" for b in backends) + " |")
    print("|---|" + "---:|" * len(backends))
    for what, by_backend in rows.items():
        print(f"| {what} | " + " | ".join(f"{by_backend[b]:.1f}" for b in backends) + " |")
    write_json(args.json, {"runs": args.runs, "bare_python": BARE_PYTHON, "medians_ms": rows})


if __name__ == "__main__":
    main()
