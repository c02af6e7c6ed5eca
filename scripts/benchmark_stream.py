#!/usr/bin/env python
"""Benchmark the output stream: sandbox → websocket client, through a real embedded deployment.

Starts ``manage.py serve`` on a fresh data dir, then:

- **throughput**: a script writes ``--mib`` MiB as short lines (80 bytes) and
  as long lines (64 KiB); a websocket client (the demo agent's token) follows
  ``/ws/executions/{id}/`` from the first chunk to the final status. Rate =
  bytes / (last byte received − the script's own start time), beside the
  same script run in the same sandbox backend in this process (the baseline).
  Every byte is checked: nothing lost, nothing duplicated, sequence unbroken.
- **first line**: a script prints its clock every 100 ms after an idle gap;
  the latency is the client's clock on arrival minus the printed one.

    .venv/bin/python scripts/benchmark_stream.py [--mib 8] [--lines 40] [--backend local]
                                                 [--json PATH]

``--json PATH`` also writes the figures to PATH as a JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchmarking import percentile, run_in_sandbox, write_json  # noqa: E402
from tests.serving import Server, start_server  # noqa: E402

SHORT, LONG = 80, 64 * 1024
FOLLOW_TIMEOUT = 120  # a stream that never ends is a failure, not a long wait


def volume_script(mib: int, line_bytes: int) -> str:
    return (
        "import sys, time\n"
        "sys.stdout.write(repr(time.time()) + '\\n'); sys.stdout.flush()\n"
        f"line = 'x' * {line_bytes - 1} + '\\n'\n"
        f"for _ in range({mib * 1024 * 1024 // line_bytes}):\n"
        "    sys.stdout.write(line)\n"
    )


def ticks_script(lines: int) -> str:
    return (
        "import time\n"
        "time.sleep(0.5)\n"  # the client is following by then
        f"for _ in range({lines}):\n"
        "    print(repr(time.time()), flush=True)\n"
        "    time.sleep(0.1)\n"
    )


async def follow(server: Server, code: str) -> list[tuple[float, dict]]:
    """Propose ``code`` (auto-approved), follow its output; (arrival time, chunk) pairs."""
    status, proposal = server.api(
        "POST",
        "/api/v1/proposals",
        {"action": "script.execute", "parameters": {"language": "python", "code": code}},
    )
    assert status == 201 and proposal["execution_id"], proposal
    url = server.base.replace("http", "ws") + f"/ws/executions/{proposal['execution_id']}/"
    received = []
    async with websockets.connect(
        url, additional_headers={"Authorization": f"Bearer {server.token}"}, max_size=None
    ) as ws:
        async for raw in ws:
            now = time.time()
            message = json.loads(raw)
            if message["type"] == "chunk":
                received.append((now, message))
            elif message["type"] == "status" and message["terminal"]:
                assert message["status"] == "succeeded", message
                break
    seqs = [chunk["seq"] for _, chunk in received]
    assert seqs == list(range(1, len(seqs) + 1)), "a chunk was lost or duplicated"
    return received


def stdout_of(chunks: list[tuple[float, dict]]) -> str:
    return "".join(c["data"] for _, c in chunks if c["stream"] == "stdout")


def followed(server: Server, code: str) -> list[tuple[float, dict]]:
    return asyncio.run(asyncio.wait_for(follow(server, code), FOLLOW_TIMEOUT))


def throughput(server: Server, mib: int, line_bytes: int) -> float:
    chunks = followed(server, volume_script(mib, line_bytes))
    text = stdout_of(chunks)
    first, _, rest = text.partition("\n")
    expected = ("x" * (line_bytes - 1) + "\n") * (mib * 1024 * 1024 // line_bytes)
    assert rest == expected, f"stream differs: {len(rest)} bytes, expected {len(expected)}"
    return len(text) / (chunks[-1][0] - float(first))


def first_line_latencies(server: Server, lines: int) -> list[float]:
    latencies = []
    for arrived, chunk in followed(server, ticks_script(lines)):
        for printed in chunk["data"].split():
            latencies.append(arrived - float(printed))
    assert len(latencies) == lines, latencies
    return latencies


def direct(backend: str, mib: int, line_bytes: int) -> float:
    sink = run_in_sandbox(backend, volume_script(mib, line_bytes), (mib + 1) * 1024 * 1024)
    done = time.time()
    text = sink.stdout
    first, _, rest = text.partition("\n")
    assert len(rest) == mib * 1024 * 1024 // line_bytes * line_bytes, len(rest)
    return len(text) / (done - float(first))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=8)
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per kind (median)")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--json", help="also write the figures to this file, as JSON")
    args = parser.parse_args()
    cap = str((args.mib + 1) * 1024 * 1024)
    kinds = {"short lines (80 B)": SHORT, "long lines (64 KiB)": LONG}
    with tempfile.TemporaryDirectory(prefix="airlock-bench-") as data_dir:
        server = start_server(
            Path(data_dir), backend=args.backend, extra_env={"OUTPUT_CAP_BYTES": cap}
        )
        try:
            streamed = {
                name: [throughput(server, args.mib, size) for _ in range(args.runs)]
                for name, size in kinds.items()
            }
            latencies = first_line_latencies(server, args.lines)
        finally:
            server.stop()
    alone = {
        name: [direct(args.backend, args.mib, size) for _ in range(args.runs)]
        for name, size in kinds.items()
    }
    mb = 1e6
    print(f"backend={args.backend} volume={args.mib} MiB runs={args.runs}")
    print("| output | sandbox alone MB/s | to the websocket MB/s | ratio |")
    print("|---|---|---|---|")
    for name in kinds:
        base, via = statistics.median(alone[name]), statistics.median(streamed[name])
        print(f"| {name} | {base / mb:.1f} | {via / mb:.1f} | {via / base:.2f} |")
    print()
    print("| first line after idle, printed → websocket client | p50 ms | p95 ms | max ms |")
    print("|---|---|---|---|")
    print(
        f"| {len(latencies)} lines | {statistics.median(latencies) * 1000:.1f} | "
        f"{percentile(latencies, 0.95) * 1000:.1f} | {max(latencies) * 1000:.1f} |"
    )
    write_json(args.json, {
        "backend": args.backend, "mib": args.mib, "runs": args.runs,
        "throughput_mb_s": {name: {
            "sandbox_alone": statistics.median(alone[name]) / mb,
            "websocket": statistics.median(streamed[name]) / mb,
        } for name in kinds},
        "first_line_ms": {
            "lines": len(latencies), "p50": statistics.median(latencies) * 1000,
            "p95": percentile(latencies, 0.95) * 1000, "max": max(latencies) * 1000,
        },
    })  # fmt: skip


if __name__ == "__main__":
    main()
