"""The output archive: ``output/YYYY-MM-DD.jsonl.gz`` per day, and ``manifest.json`` of checksums.

A day's file holds one JSON line per execution that finished that day (UTC):
its id, action, status, times, and its output chunks in order. A file is
written beside its final name, synced, then renamed over it, and only then
entered in the manifest (written the same way); a day archived again (a
pass that stopped half-way) keeps what is already there and adds the new.
Reading a file checks it against the manifest first: a corrupt archive is
named, never read as if whole.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path

from infrastructure.files import sha256_of, write_whole

MANIFEST = "manifest.json"


class ArchiveError(Exception):
    """An archive that cannot be written or trusted; the message says why."""


class Archive:
    def __init__(self, root: Path):
        self.root = root

    def name(self, day: date) -> str:
        return f"output/{day.isoformat()}.jsonl.gz"

    def manifest(self) -> dict:
        try:
            return json.loads((self.root / MANIFEST).read_text())
        except FileNotFoundError:
            return {"format": 1, "files": {}}
        except (OSError, ValueError) as error:
            raise ArchiveError(f"{self.root / MANIFEST} cannot be read: {error}") from None

    def _checked(self, name: str, manifest: dict) -> Path:
        path = self.root / name
        entry = manifest["files"].get(name)
        if entry is None:
            raise ArchiveError(f"{name} is not in the archive's manifest")
        if not path.exists():
            raise ArchiveError(f"{name} is missing from {self.root}")
        if sha256_of(path) != entry["sha256"]:
            raise ArchiveError(f"{name} does not match its checksum: the archive file is corrupt")
        return path

    def lines(self, day: date) -> Iterator[dict]:
        """The day's archived executions (checked against the manifest first); none if not archived."""
        manifest = self.manifest()
        name = self.name(day)
        if name not in manifest["files"]:
            return
        with gzip.open(self._checked(name, manifest), "rt") as handle:
            for line in handle:
                yield json.loads(line)

    def write_day(self, day: date, new: Iterable[dict]) -> dict:
        """Archive ``new`` executions of ``day`` (with the ones already there); its manifest entry."""
        manifest = self.manifest()
        name = self.name(day)
        path = self.root / name
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        kept = list(self.lines(day)) if name in manifest["files"] else []
        counts = {"executions": 0, "chunks": 0}

        def write(handle) -> None:
            seen = set()
            with gzip.open(handle, "wt", compresslevel=6) as out:
                for line in _merged(kept, new, seen):
                    out.write(json.dumps(line, separators=(",", ":")) + "\n")
                    counts["executions"] += 1
                    counts["chunks"] += len(line["chunks"])

        write_whole(path, write)
        entry = {
            "sha256": sha256_of(path),
            "bytes": path.stat().st_size,
            **counts,
            "archived_at": datetime.now(UTC).isoformat(),
        }
        manifest["files"][name] = entry
        write_whole(
            self.root / MANIFEST,
            lambda handle: handle.write((json.dumps(manifest, indent=1) + "\n").encode()),
        )
        return {"file": name, **entry}

    def verify(self) -> tuple[int, list[str]]:
        """How many files the manifest lists, and what is wrong with any of them."""
        manifest = self.manifest()
        problems = []
        for name in sorted(manifest["files"]):
            try:
                self._checked(name, manifest)
            except ArchiveError as error:
                problems.append(str(error))
        return len(manifest["files"]), problems


def _merged(kept: list[dict], new: Iterable[dict], seen: set) -> Iterator[dict]:
    """The new lines, then the kept ones they do not name; each execution once.

    An execution in both (a pass stopped after deleting part of its chunks)
    keeps every chunk either holds, in order.
    """
    earlier = {line["execution_id"]: line for line in kept}
    for line in new:
        pk = line["execution_id"]
        seen.add(pk)
        if pk in earlier:
            chunks = {chunk[0]: chunk for chunk in earlier[pk]["chunks"]}
            chunks.update({chunk[0]: chunk for chunk in line["chunks"]})
            line = {**line, "chunks": [chunks[seq] for seq in sorted(chunks)]}
        yield line
    for line in kept:
        if line["execution_id"] not in seen:
            yield line
