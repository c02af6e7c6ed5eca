"""Where archive files are kept: the interface every store implements."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path


class StoreError(Exception):
    """A store that cannot be reached or written; the message says which and why."""


class Store:
    """Whole files by name (``output/2026-01-02.jsonl.gz``): each written at once, replacing."""

    location: str  # what people are shown: a path or ``s3://bucket/prefix``

    def read_bytes(self, name: str) -> bytes | None:
        """The file's content; None when there is no such file."""
        raise NotImplementedError

    def write_bytes(self, name: str, data: bytes) -> None:
        raise NotImplementedError

    def put(self, name: str, source: Path) -> None:
        """Store the local file ``source`` as ``name`` (whole, or not at all)."""
        raise NotImplementedError

    def local(self, name: str) -> AbstractContextManager[Path | None]:
        """The file as a local path for the time of the ``with`` (None when missing)."""
        raise NotImplementedError
