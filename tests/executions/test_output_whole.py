"""A run's output arrives whole when its writes are cut short by a signal, on every backend.

Python's ``-u`` streams write straight to the pipe and drop whatever a write
did not get through: a write larger than the room left in the pipe waits for
the reader, and a signal the script handles ends that wait with part of it
written. The script here writes 200 KB at a time (three times a pipe's
capacity) while a thread of its own signals it every half millisecond, and
the sink reads slowly, so its writes wait: with ``-u`` about two thirds of the
output was lost, and the run still succeeded.
"""

from __future__ import annotations

import time

from executions.sandboxes import RunRequest
from executions.sandboxes.base import MemorySink

WRITES = 48
SIZE = 200_000
SCRIPT = f"""
import signal, sys, threading, time
signal.signal(signal.SIGUSR1, lambda *args: None)
main = threading.main_thread().ident

def poke():
    while True:
        time.sleep(0.0005)
        signal.pthread_kill(main, signal.SIGUSR1)

threading.Thread(target=poke, daemon=True).start()
out = "o" * {SIZE - 1} + "\\n"
err = "e" * {SIZE - 1} + "\\n"
for _ in range({WRITES}):
    sys.stdout.write(out)
    sys.stderr.write(err)
print("done", flush=True)
"""


class SlowSink(MemorySink):
    """Takes its time over each piece, so that the script's writes wait for room."""

    def emit(self, stream: str, text: str) -> None:
        time.sleep(0.002)
        super().emit(stream, text)


def test_output_cut_short_by_a_signal_arrives_whole(any_sandbox):
    name, sandbox = any_sandbox
    for _ in range(2):  # a cold interpreter, then (where kept) a pre-started one
        sink = SlowSink(cap_bytes=64 << 20)
        outcome = sandbox.run(RunRequest("python", SCRIPT), sink)
        assert outcome.exit_code == 0, (name, sink.stderr[-500:])
        assert len(sink.stdout) == WRITES * SIZE + len("done\n"), name
        assert sink.stdout == ("o" * (SIZE - 1) + "\n") * WRITES + "done\n", name
        assert sink.stderr == ("e" * (SIZE - 1) + "\n") * WRITES, name
