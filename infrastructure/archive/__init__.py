"""The archive: what retention takes out of the database, kept as checked day files.

Owns the day files and their manifest (``days``: one compressed JSON-lines
file per kind of record and UTC day, ``<kind>/YYYY-MM-DD.jsonl.gz``, entered
in ``manifest.json`` with its SHA-256 and checked against it on every read)
and where they are kept (``store``: the interface; ``locations``: the store a
location names; ``directory`` a folder, ``s3`` an S3-compatible bucket). What goes
in a line, and when rows leave the database, is the apps' own retention.

May import Django, boto3 and ``infrastructure.files`` only.
"""

from .days import Archive, ArchiveError, cutoff, delete_batched, delete_set
from .locations import store_for

__all__ = ["Archive", "ArchiveError", "cutoff", "delete_batched", "delete_set", "store_for"]
