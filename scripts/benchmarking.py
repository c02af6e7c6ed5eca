"""What the benchmark scripts share: percentiles, a run in the sandbox alone (the baseline),
and ``--json PATH``: the figures a script printed, written as one JSON object."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.serving import lift_agent_limits  # noqa: F401 - the benchmarks use it from here


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_in_sandbox(backend: str, code: str, cap_bytes: int = 1024 * 1024):
    """Run Python ``code`` in ``backend`` in this process, as a worker would; its MemorySink."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from executions.sandboxes import RunRequest, get_sandbox
    from executions.sandboxes.base import MemorySink

    sink = MemorySink(cap_bytes=cap_bytes)
    get_sandbox(backend).run(RunRequest("python", code), sink)
    return sink


def write_json(path: str | None, figures: dict) -> None:
    """Write ``figures`` to ``path`` as JSON (``--json PATH``); nothing when ``path`` is None."""
    if path:
        Path(path).write_text(json.dumps(figures, indent=1) + "\n")
