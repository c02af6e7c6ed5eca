"""The archive: what retention takes out of the database, kept as checked day files.

Owns the day files and their manifest (``days``: one compressed JSON-lines
file per kind of record and UTC day, ``<kind>/YYYY-MM-DD.jsonl.gz``, entered
in ``manifest.json`` with its SHA-256 and checked against it on every read)
and where they are kept (``store``: the interface; ``locations``: the store a
location names; ``directory`` a folder, ``s3`` an S3-compatible bucket), and how
rows leave for it (``rows``: lines written by the database's JSON functions;
``deletes``: set-based, a bounded batch per transaction; ``behind``: a day's
deletes while the next day's file is written). What goes
in a line, and when rows leave the database, is the apps' own retention.

May import Django, boto3 and ``infrastructure.files`` only.
"""

from .behind import StepBehind
from .days import Archive, ArchiveError, cutoff, days_of
from .deletes import delete_batched, delete_set
from .locations import store_for
from .rows import (
    Columns,
    as_text,
    fetch,
    flag,
    iso_time,
    json_array,
    json_object,
    json_row,
    json_rows,
    lines,
    marks,
)

__all__ = [
    "Archive",
    "ArchiveError",
    "Columns",
    "as_text",
    "StepBehind",
    "cutoff",
    "days_of",
    "delete_batched",
    "delete_set",
    "fetch",
    "flag",
    "iso_time",
    "json_array",
    "json_object",
    "json_row",
    "json_rows",
    "lines",
    "marks",
    "store_for",
]
