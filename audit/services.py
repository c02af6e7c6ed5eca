"""Appending to and verifying the tamper-evident audit chain."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from infrastructure.appends import read_under_append_lock
from infrastructure.prepared import PreparedInsert

from .models import AuditEvent, ChainArchive

GENESIS = "0" * 64
# Every change reads the chain's end, under the append lock.
_CHAIN_END = f"SELECT seq, hash FROM {AuditEvent._meta.db_table} ORDER BY seq DESC LIMIT 1"
_append = PreparedInsert(AuditEvent)


_data = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode


def _digest(
    prev_hash: str,
    seq: int,
    created_at: datetime,
    actor: str,
    verb: str,
    object_type: str,
    object_id: str,
    data: dict,
) -> str:
    """HMAC-SHA256 (keyed with SECRET_KEY) of the row as compact JSON with sorted keys:
    ``[prev_hash, seq, created_at, actor, verb, object_type, object_id, data]``."""
    return _digester(settings.SECRET_KEY)(
        prev_hash, seq, created_at.isoformat(), actor, verb, object_type, object_id, data
    )


@functools.lru_cache(maxsize=4)
def _digester(key: str):
    """``_digest`` for one key, the time already written out: what a long verification calls.

    The JSON is written by hand (the same bytes ``json.dumps`` makes of that
    list) and the HMAC copied from one prepared with the key.
    """
    keyed = hmac.new(key.encode(), digestmod=hashlib.sha256)
    text, encode = json.encoder.encode_basestring_ascii, _data

    def digest(prev_hash, seq, at, actor, verb, object_type, object_id, data) -> str:
        mac = keyed.copy()
        mac.update(
            f"[{text(prev_hash)},{int(seq)},{text(at)},{text(actor)},{text(verb)},"
            f"{text(object_type)},{text(object_id)},{encode(data)}]".encode()
        )
        return mac.hexdigest()

    return digest


def actor_label(principal: object | None) -> str:
    """A stable text label for whoever acted: a user, an agent or the system."""
    if principal is None:
        return "system"
    agent = getattr(principal, "agent", None)
    if agent is not None:
        return f"agent:{agent.name}"
    if hasattr(principal, "capabilities") and hasattr(principal, "token_hash"):
        return f"agent:{principal.name}"
    username = getattr(principal, "get_username", None)
    if username:
        return f"user:{username()}"
    return str(principal)


def record(actor: str, verb: str, obj: object | None = None, **data) -> AuditEvent:
    """Append one event. Must run inside the transaction of the change it records."""
    object_type = obj._meta.model_name if obj is not None else ""
    object_id = str(obj.pk) if obj is not None else ""
    data = json.loads(json.dumps(data, default=str))  # what is hashed is what is stored
    # No savepoint of its own: a failed append fails the change it records.
    with transaction.atomic(savepoint=False):
        end = _known_end()
        if end is None:
            # The chain's end cannot move until this commits.
            last = read_under_append_lock(_CHAIN_END)
            end = _End(*last[0]) if last else _End(0, GENESIS)
        seq, prev_hash = end.seq + 1, end.hash
        created_at = timezone.now()
        event = _append.create(
            seq=seq,
            created_at=created_at,
            actor=actor,
            verb=verb,
            object_type=object_type,
            object_id=object_id,
            data=data,
            prev_hash=prev_hash,
            hash=_digest(prev_hash, seq, created_at, actor, verb, object_type, object_id, data),
        )
        transaction.on_commit(_End(seq, event.hash))
        return event


class _End:
    """The chain's end as this transaction left it, kept among its commit hooks.

    The next append of the same transaction, which still holds the append lock,
    starts from it instead of taking the lock and reading the end again. Django
    drops a transaction's hooks when it commits or rolls back, and a savepoint's
    when the savepoint rolls back, so the newest ``_End`` still registered is
    the end of the rows that still exist. Running it at commit does nothing.
    """

    __slots__ = ("seq", "hash")

    def __init__(self, seq: int, hash: str):
        self.seq, self.hash = seq, hash

    def __call__(self) -> None:
        pass


def _known_end() -> _End | None:
    for _, hook, _ in reversed(connection.run_on_commit):
        if isinstance(hook, _End):
            return hook
    return None


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    checked: int
    first_bad_seq: int | None = None
    problem: str = ""


# The time as text, in UTC, written by the database: parsing it into a datetime to
# write it out again was a fifth of a long verification on SQLite, a third on PostgreSQL.
_TIME_AS_TEXT = {
    "sqlite": "CAST(created_at AS TEXT)",
    "postgresql": """to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US')""",
}
_ROWS = (
    "SELECT seq, {created_at}, actor, verb, object_type, object_id, data, prev_hash, hash "
    f"FROM {AuditEvent._meta.db_table} WHERE seq BETWEEN %s AND %s ORDER BY seq"
)
PARALLEL_FROM = 100_000  # rows from which verify_chain(workers=…) splits the chain


def _utc_text(moment: str) -> str:
    """A time of ``_TIME_AS_TEXT`` as ``record`` hashed it: ``datetime.isoformat`` in UTC."""
    return moment.replace(" ", "T", 1).removesuffix(".000000") + "+00:00"


@dataclass(frozen=True)
class _Span:
    """What one stretch of rows ``first``..``last`` said of itself."""

    report: ChainReport
    first_prev: str | None  # the prev_hash of its first row (None: no row)
    last_seq: int
    last_hash: str


def _verify_span(first: int, last: int, batch_size: int) -> _Span:
    """Check rows ``first``..``last``: each present, linked to the one before, unedited."""
    expected_seq, expected_prev, checked, first_prev = first, None, 0, None
    last_hash = ""
    digest_of, loads = _digester(settings.SECRET_KEY), json.loads
    with connection.cursor() as cursor:
        cursor.execute(_ROWS.format(created_at=_TIME_AS_TEXT[connection.vendor]), [first, last])
        while rows := cursor.fetchmany(batch_size):
            for seq, created_at, actor, verb, otype, oid, data, prev_hash, stored in rows:
                if seq != expected_seq:
                    kind = "deleted" if seq > expected_seq else "inserted"
                    problem = f"row {expected_seq} {kind} (found {seq})"
                    return _Span(
                        ChainReport(False, checked, expected_seq, problem), first_prev, 0, ""
                    )
                if expected_prev is None:
                    first_prev = prev_hash
                elif prev_hash != expected_prev:
                    problem = f"row {seq} does not follow row {seq - 1} (inserted or deleted)"
                    return _Span(ChainReport(False, checked, seq, problem), first_prev, 0, "")
                if isinstance(data, str):
                    data = loads(data)
                at = _utc_text(created_at)
                digest = digest_of(prev_hash, seq, at, actor, verb, otype, oid, data)
                if not hmac.compare_digest(stored, digest):
                    problem = f"row {seq} was edited"
                    return _Span(ChainReport(False, checked, seq, problem), first_prev, 0, "")
                expected_seq, expected_prev, checked = seq + 1, stored, checked + 1
                last_hash = stored
    return _Span(ChainReport(True, checked), first_prev, expected_seq - 1, last_hash)


def _span_in_own_process(bounds: tuple[int, int, int]) -> _Span:
    """In a forked process: a connection of its own, outside any pool (whose threads
    stayed with the parent), then its stretch."""
    settings_dict = dict(connections[DEFAULT_DB_ALIAS].settings_dict)
    settings_dict["OPTIONS"] = {k: v for k, v in settings_dict["OPTIONS"].items() if k != "pool"}
    connections[DEFAULT_DB_ALIAS] = type(connections[DEFAULT_DB_ALIAS])(settings_dict)
    try:
        return _verify_span(*bounds)
    finally:
        connections[DEFAULT_DB_ALIAS].close()


def chain_end() -> tuple[int, str]:
    """The chain's last row as committed now: its ``seq`` and ``hash`` (``(0, GENESIS)`` empty)."""
    return AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first() or (0, GENESIS)


def verify_chain(batch_size: int = 5000, workers: int = 1) -> ChainReport:
    """Walk the chain in order; report the first edited, inserted or deleted row.

    The walk starts after the chain's archived part (``ChainArchive``: rows
    moved to the archive, checked by ``archive.verify_archived``), or at the
    first row. With ``workers`` above one and a long chain
    (``PARALLEL_FROM`` rows), the chain is cut into stretches checked by as
    many processes at once (each with its own connection), and the seams
    between them checked here: the command line's choice, never a web
    process's.
    """
    start, prev = ChainArchive.objects.values_list("through_seq", "through_hash").first() or (
        0,
        GENESIS,
    )
    head, _ = chain_end()
    if start and head <= start:  # the chain's end is never archived
        return ChainReport(False, 0, start + 1, f"row {start + 1} deleted (none after the archive)")
    rows = head - start
    if workers > 1 and rows >= PARALLEL_FROM:
        step = -(-rows // workers)
        bounds = [
            (first, min(first + step - 1, head), batch_size)
            for first in range(start + 1, head + 1, step)
        ]
        connection.close()  # not carried into the children
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            spans = list(pool.map(_span_in_own_process, bounds))
    else:
        bounds = [(start + 1, max(head, start + 1), batch_size)]
        spans = [_verify_span(*bounds[0])]
    checked = 0
    for (first, last, _), span in zip(bounds, spans, strict=True):
        if span.report.checked and span.first_prev != prev:
            problem = f"row {first} does not follow row {first - 1} (inserted or deleted)"
            return ChainReport(False, checked, first, problem)
        if not span.report.ok:
            report = span.report
            return ChainReport(
                False, checked + report.checked, report.first_bad_seq, report.problem
            )
        if head > start and span.last_seq != last:
            return ChainReport(
                False,
                checked + span.report.checked,
                span.last_seq + 1,
                f"row {span.last_seq + 1} deleted (found none after it)",
            )
        checked, prev = checked + span.report.checked, span.last_hash
    return ChainReport(True, checked)


def verify_chain_after(seq: int, hash: str, batch_size: int = 5000) -> ChainReport:
    """Check only the rows after ``seq``, whose row was known whole with ``hash``: the first
    one must follow it. What a page that showed the whole chain verified a while ago checks."""
    head, _ = chain_end()
    if head < seq:
        return ChainReport(False, 0, head + 1, f"row {head + 1} deleted (the chain ends before it)")
    if head == seq:
        stored = AuditEvent.objects.filter(seq=seq).values_list("hash", flat=True).first()
        if seq and stored != hash:
            return ChainReport(False, 0, seq, f"row {seq} was edited")
        return ChainReport(True, 0)
    span = _verify_span(seq + 1, head, batch_size)
    if span.report.checked and span.first_prev != hash:
        return ChainReport(False, 0, seq + 1, f"row {seq + 1} does not follow row {seq}")
    return span.report
