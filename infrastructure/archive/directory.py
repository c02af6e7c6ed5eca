"""Archive files in a directory of this host (0700), each written beside its name, synced and renamed."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infrastructure.files import write_whole

from .store import Store


class DirectoryStore(Store):
    def __init__(self, root: Path):
        self.root = root
        self.location = str(root)

    def read_bytes(self, name: str) -> bytes | None:
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None

    def write_bytes(self, name: str, data: bytes) -> None:
        self._parent(name)
        write_whole(self.root / name, lambda handle: handle.write(data))

    def put(self, name: str, source: Path) -> None:
        self._parent(name)
        with open(source, "rb") as handle:
            write_whole(self.root / name, lambda out: shutil.copyfileobj(handle, out, 1 << 20))

    @contextmanager
    def local(self, name: str) -> Iterator[Path | None]:
        path = self.root / name
        yield path if path.exists() else None

    def _parent(self, name: str) -> None:
        (self.root / name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
