"""Appending to and verifying the tamper-evident audit chain."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from infrastructure.appends import read_under_append_lock
from infrastructure.prepared import PreparedInsert

from .models import AuditEvent

GENESIS = "0" * 64
# Every change reads the chain's end, under the append lock.
_CHAIN_END = f"SELECT seq, hash FROM {AuditEvent._meta.db_table} ORDER BY seq DESC LIMIT 1"
_append = PreparedInsert(AuditEvent)


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
    body = json.dumps(
        [prev_hash, seq, created_at.isoformat(), actor, verb, object_type, object_id, data],
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hmac.new(settings.SECRET_KEY.encode(), body.encode(), hashlib.sha256).hexdigest()


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


def verify_chain(batch_size: int = 2000) -> ChainReport:
    """Walk the chain in order; report the first edited, inserted or deleted row."""
    expected_prev, expected_seq, checked = GENESIS, 1, 0
    rows = AuditEvent.objects.order_by("seq").values_list(
        "seq",
        "created_at",
        "actor",
        "verb",
        "object_type",
        "object_id",
        "data",
        "prev_hash",
        "hash",
    )
    for seq, created_at, actor, verb, otype, oid, data, prev_hash, stored in rows.iterator(
        chunk_size=batch_size
    ):
        if seq != expected_seq:
            kind = "deleted" if seq > expected_seq else "inserted"
            return ChainReport(
                False, checked, expected_seq, f"row {expected_seq} {kind} (found {seq})"
            )
        if prev_hash != expected_prev:
            return ChainReport(
                False,
                checked,
                seq,
                f"row {seq} does not follow row {seq - 1} (inserted or deleted)",
            )
        if not hmac.compare_digest(
            stored, _digest(prev_hash, seq, created_at, actor, verb, otype, oid, data)
        ):
            return ChainReport(False, checked, seq, f"row {seq} was edited")
        expected_prev, expected_seq, checked = stored, seq + 1, checked + 1
    return ChainReport(True, checked)
