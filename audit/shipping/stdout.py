"""``stdout:``: each entry a JSON line on the shipping worker's standard output.

For a container whose log collector reads standard output; a line written is
delivered as far as Airlock can know.
"""

from __future__ import annotations

import json
import sys

from .base import Sink


class StdoutSink(Sink):
    def send(self, entries: list[dict]) -> None:
        lines = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)
        sys.stdout.write(lines)
        sys.stdout.flush()
