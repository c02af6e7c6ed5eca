"""Write ``tests/durations.json``, each test file's seconds, from a run's JUnit XML.

    .venv/bin/pytest -n 2 --dist loadfile --junitxml=/tmp/run.xml
    .venv/bin/python -m tests.durations /tmp/run.xml

``tests/conftest.py`` hands files out longest first by it, so that the workers of a
parallel run end together. Files the run did not see keep their seconds.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).with_name("durations.json")


def seconds_per_file(junit: Path) -> dict[str, float]:
    found: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        while module and module[-1][:1].isupper():  # a test class, not a module
            module.pop()
        if module:
            found["/".join(module) + ".py"] += float(case.get("time") or 0)
    return found


def main(junit: str) -> None:
    merged = json.loads(OUT.read_text()) if OUT.exists() else {}
    merged.update({name: round(value, 1) for name, value in seconds_per_file(Path(junit)).items()})
    ordered = dict(sorted(merged.items(), key=lambda item: -item[1]))
    OUT.write_text(json.dumps(ordered, indent=1) + "\n")
    print(f"{OUT}: {len(ordered)} files, {sum(ordered.values()):.0f} s in all")


if __name__ == "__main__":
    main(*sys.argv[1:])
