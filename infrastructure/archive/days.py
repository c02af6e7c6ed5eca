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
from pathlib import Path

from django.db import connections, models
from django.db.models import ProtectedError

from infrastructure.files import sha256_of

from .locations import store_for
from .store import Store, StoreError

MANIFEST = "manifest.json"
# How a day written again keeps what its file held: (kept lines, new lines) → the day's lines.
Merge = Callable[[list[dict], Iterable[dict]], Iterator[dict]]


def cutoff(days: int, now: datetime) -> datetime:
    """Midnight (UTC) ``days`` days before ``now``: what ended before it is due. Whole days
    only, so that each day is archived in one pass into one file."""
    now = now.astimezone(UTC)
    return datetime.combine(now.date() - timedelta(days=days), datetime.min.time(), tzinfo=UTC)


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

    def write_day(self, kind: str, day: date, new: Iterable[dict], merge: Merge) -> dict:
        """Archive ``new`` records of ``day`` (merged with the ones already there); its entry."""
        manifest = self.manifest()
        name = self.name(kind, day)
        kept = list(self.lines(kind, day)) if name in manifest["files"] else []
        count = 0
        with tempfile.TemporaryDirectory(prefix="airlock-archive-") as scratch:
            path = Path(scratch) / "day.jsonl.gz"
            with gzip.open(path, "wt", compresslevel=6) as out:
                for line in merge(kept, new):
                    out.write(json.dumps(line, separators=(",", ":")) + "\n")
                    count += 1
            entry = {
                "sha256": sha256_of(path),
                "bytes": path.stat().st_size,
                "records": count,
                "archived_at": datetime.now(UTC).isoformat(),
            }
            try:
                self.store.put(name, path)
                manifest["files"][name] = entry
                self.store.write_bytes(MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
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


def delete_batched(rows, batch: int = 1000) -> int:
    """Delete the rows of queryset ``rows``, ``batch`` per statement, each statement its own
    short transaction (autocommit), so that no writer waits long behind it; how many."""
    connection = connections[rows.db]
    table = connection.ops.quote_name(rows.model._meta.db_table)
    deleted = 0
    while ids := list(rows.order_by().values_list("pk", flat=True)[:batch]):
        marks = ", ".join(["%s"] * len(ids))
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE id IN ({marks})", ids)
        deleted += len(ids)
    return deleted


def delete_set(model, pks: list) -> None:
    """Delete the rows of ``model`` whose keys are ``pks``, and what refers to them as each
    reference's ``on_delete`` says, a statement per table: no row is loaded, where Django's
    collector reads every row (and its JSON) before it deletes. Call inside a transaction.

    CASCADE deletes the referring rows (their own referrers first), SET_NULL empties the
    reference, DO_NOTHING leaves it; PROTECT and RESTRICT refuse (``ProtectedError``) when a
    row still refers; any other rule is left to Django's collector.
    """
    if not pks:
        return
    rows = model._base_manager.filter(pk__in=pks)
    for relation in _referrers(model):
        referring = relation.related_model._base_manager.filter(**{
            f"{relation.field.name}__in": pks
        })  # fmt: skip
        rule = relation.on_delete
        if rule is models.CASCADE:
            if _referrers(relation.related_model):
                delete_set(relation.related_model, list(referring.values_list("pk", flat=True)))
            else:
                referring._raw_delete(referring.db)
        elif rule is models.SET_NULL:
            referring.update(**{relation.field.name: None})
        elif rule in (models.PROTECT, models.RESTRICT):
            if referring.exists():
                raise ProtectedError(f"{relation.related_model.__name__} rows refer to them", [])
        elif rule is not models.DO_NOTHING:
            rows.delete()
            return
    rows._raw_delete(rows.db)


def _referrers(model) -> list:
    """The references to ``model`` from other tables (hidden ones too), as Django's collector
    finds them."""
    return [
        field
        for field in model._meta.get_fields(include_hidden=True)
        if field.auto_created and not field.concrete and (field.one_to_one or field.one_to_many)
    ]
