"""The store a location names: a directory, or an S3-compatible bucket."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from .store import Store, StoreError


def store_for(location: str) -> Store:
    """The store of ``location``: a directory, or ``s3://bucket/prefix?endpoint=URL&region=R``."""
    if location.startswith("s3://"):
        from .s3 import S3Store

        parts = urlsplit(location)
        if not parts.netloc:
            raise StoreError(f"{location!r}: an S3 location names its bucket: s3://bucket/prefix")
        return S3Store(parts.netloc, parts.path.strip("/"), parts.query)
    if "://" in location:
        raise StoreError(f"{location!r}: an archive is a directory or an s3:// bucket")
    from .directory import DirectoryStore

    return DirectoryStore(Path(location))
