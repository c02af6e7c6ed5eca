"""Files written to be trusted later: their SHA-256, and a write that is whole or not at all."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_whole(path: Path, write: Callable[[BinaryIO], None], mode: int = 0o600) -> None:
    """Write ``path`` through a file beside it, synced, then renamed over it (``mode``)."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(partial, mode)
    os.replace(partial, path)
