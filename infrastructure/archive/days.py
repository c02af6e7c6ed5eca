"""Day files: ``<kind>/YYYY-MM-DD.jsonl.gz`` per kind of record, and ``manifest.json`` of checksums.

A day's file holds one JSON line per record of that kind and UTC day. It is
written to a scratch file, stored whole, and only then entered in the
manifest (stored the same way); a day archived again (a pass that stopped
half-way) is written anew from what the file held and what is new, merged by
the caller's rule. Reading a file checks it against the manifest first: a
corrupt archive is named, never read as if whole.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from pathlib import Path

from infrastructure.files import sha256_of

from .locations import store_for
from .store import Store, StoreError

MANIFEST = "manifest.json"
COMPRESSION = 3  # gzip's level: 6 costs twice the time for a third less size
LINES_PER_WRITE = 500  # lines joined into one write to the compressor
_dumps = json.JSONEncoder(separators=(",", ":")).encode
# How a day written again keeps what its file held: (kept lines, new lines) → the day's lines.
Merge = Callable[[list[dict], Iterable[dict]], Iterator[dict]]


def cutoff(days: int, now: datetime) -> datetime:
    """Midnight (UTC) ``days`` days before ``now``: what ended before it is due. Whole days
    only, so that each day is archived in one pass into one file."""
    now = now.astimezone(UTC)
    return datetime.combine(now.date() - timedelta(days=days), datetime.min.time(), tzinfo=UTC)


def _manifest_text(manifest: dict) -> str:
    """The manifest as JSON, a line per file: written after every day, so written by the
    C encoder (``indent`` takes Python's, which at a year of days took seconds a pass)."""
    head = _dumps({key: value for key, value in manifest.items() if key != "files"})
    files = ",\n".join(
        f"{_dumps(name)}:{_dumps(entry)}" for name, entry in manifest["files"].items()
    )
    return f'{head[:-1]}{"," if len(head) > 2 else ""}"files":{{\n{files}\n}}}}\n'


def days_of(rows, field: str, before: datetime) -> Iterator[datetime]:
    """The start (UTC midnight) of each day in which one of queryset ``rows`` has its time
    ``field`` before ``before``, oldest first. Each day is the first row at or after the end
    of the one before it: a read along the field's index, never one over every row (as a
    ``GROUP BY`` of the day would be), and never the same day twice."""
    after = None
    while True:
        due = rows.filter(**{f"{field}__lt": before})
        if after is not None:
            due = due.filter(**{f"{field}__gte": after})
        at = due.order_by(field).values_list(field, flat=True).first()
        if at is None:
            return
        start = datetime.combine(at.astimezone(UTC).date(), datetime.min.time(), tzinfo=UTC)
        yield start
        after = start + timedelta(days=1)


class ArchiveError(Exception):
    """An archive that cannot be written or trusted; the message says why."""


class Archive:
    def __init__(self, store: Store | str):
        self.store = store_for(store) if isinstance(store, str) else store

    @property
    def location(self) -> str:
        return self.store.location

    @staticmethod
    def name(kind: str, day: date) -> str:
        return f"{kind}/{day.isoformat()}.jsonl.gz"

    def manifest(self) -> dict:
        try:
            raw = self.store.read_bytes(MANIFEST)
            return json.loads(raw) if raw is not None else {"format": 1, "files": {}}
        except (StoreError, ValueError) as error:
            raise ArchiveError(f"{self.location}/{MANIFEST} cannot be read: {error}") from None

    def days(self, kind: str) -> list[date]:
        """The days archived of ``kind``, oldest first."""
        prefix = f"{kind}/"
        return sorted(
            date.fromisoformat(name[len(prefix) :].removesuffix(".jsonl.gz"))
            for name in self.manifest()["files"]
            if name.startswith(prefix)
        )

    def lines(self, kind: str, day: date) -> Iterator[dict]:
        """The day's archived records (checked against the manifest first); none if not archived."""
        manifest = self.manifest()
        name = self.name(kind, day)
        if name not in manifest["files"]:
            return
        with self.store.local(name) as path:
            self._check(name, path, manifest)
            with gzip.open(path, "rt") as handle:
                for line in handle:
                    yield json.loads(line)

    def write_day(self, kind: str, day: date, new: Iterable[dict | str], merge: Merge) -> dict:
        """Archive ``new`` records of ``day`` (merged with the ones already there); its entry.

        A record is a dict, or its JSON text as the database wrote it (``rows``)."""
        manifest = self.manifest()
        name = self.name(kind, day)
        kept = list(self.lines(kind, day)) if name in manifest["files"] else []
        if kept:  # a day written again: its lines merged, each read as the merge needs it
            new = merge(kept, (json.loads(line) if isinstance(line, str) else line for line in new))
        count = 0
        with tempfile.TemporaryDirectory(prefix="airlock-archive-") as scratch:
            path = Path(scratch) / "day.jsonl.gz"
            with gzip.open(path, "wb", compresslevel=COMPRESSION) as out:
                lines = iter(new)
                while block := list(islice(lines, LINES_PER_WRITE)):
                    text = "\n".join(
                        line if isinstance(line, str) else _dumps(line) for line in block
                    )
                    out.write(text.encode() + b"\n")
                    count += len(block)
            entry = {
                "sha256": sha256_of(path),
                "bytes": path.stat().st_size,
                "records": count,
                "archived_at": datetime.now(UTC).isoformat(),
            }
            try:
                self.store.put(name, path)
                manifest["files"][name] = entry
                self.store.write_bytes(MANIFEST, _manifest_text(manifest).encode())
            except StoreError as error:
                raise ArchiveError(str(error)) from None
        return {"file": name, **entry}

    def verify(self) -> tuple[int, list[str]]:
        """How many files the manifest lists, and what is wrong with any of them."""
        manifest = self.manifest()
        problems = []
        for name in sorted(manifest["files"]):
            try:
                with self.store.local(name) as path:
                    self._check(name, path, manifest)
            except (ArchiveError, StoreError) as error:
                problems.append(str(error))
        return len(manifest["files"]), problems

    def _check(self, name: str, path: Path | None, manifest: dict) -> None:
        entry = manifest["files"].get(name)
        if entry is None:
            raise ArchiveError(f"{name} is not in the archive's manifest")
        if path is None:
            raise ArchiveError(f"{name} is missing from {self.location}")
        if sha256_of(path) != entry["sha256"]:
            raise ArchiveError(f"{name} does not match its checksum: the archive file is corrupt")
