"""The shipping pass: each sink sent what follows its position, in order, until it has it all.

A worker runs ``ship_all`` every ``AUDIT_SHIP_SECONDS`` (Celery beat). For
each sink due, it claims the sink's ``SinkPosition`` with one conditional
UPDATE (a second worker skips it), sends batches of records after the
position, each followed by the checkpoints that name a record in it, and
moves the position after each batch the sink acknowledged. A failure keeps
the position, records the error and waits before the next try (doubling, at
most ``MAX_BACKOFF_SECONDS``): a sink that was down for an hour receives
everything in order when it returns, some of it perhaps twice, nothing less.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Q
from django.utils import timezone

from audit.checkpoints import as_entry
from audit.models import AuditEvent, Checkpoint, SinkPosition
from audit.services import chain_end

from .base import Sink, entry
from .http import HecSink, JsonLinesSink
from .stdout import StdoutSink
from .syslog import SyslogSink

log = logging.getLogger(__name__)

KINDS: dict[str, type[Sink]] = {
    "syslog": SyslogSink,
    "syslog+tls": SyslogSink,
    "splunk+http": HecSink,
    "splunk+https": HecSink,
    "http": JsonLinesSink,
    "https": JsonLinesSink,
    "stdout": StdoutSink,
}
BATCH = 500
CLAIM_SECONDS = 300  # a pass whose worker died is taken over after this long
MAX_BACKOFF_SECONDS = 60


def sink_for(url: str) -> Sink:
    """The sink a URL of ``AUDIT_SINKS`` names; ``ImproperlyConfigured`` says what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in KINDS:
        raise ImproperlyConfigured(
            f"AUDIT_SINKS: {url!r} is not a sink (schemes: {', '.join(sorted(KINDS))})"
        )
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"AUDIT_SINKS: {url!r} has a bad port") from None
    if parts.scheme != "stdout" and not parts.hostname:
        raise ImproperlyConfigured(f"AUDIT_SINKS: {url!r} names no host")
    if parts.scheme.startswith("syslog") and not port:
        raise ImproperlyConfigured(f"AUDIT_SINKS: {url!r} names no port")
    return KINDS[parts.scheme](url)


def configured() -> list[Sink]:
    return [sink_for(url) for url in getattr(settings, "AUDIT_SINKS", [])]


def ship_all() -> dict[str, int]:
    """One pass over every configured sink that is due; how many entries each was sent."""
    return {sink.name: ship(sink) for sink in configured()}


def ship(sink: Sink) -> int:
    """Send ``sink`` everything after its position, unless another worker holds it or it waits."""
    now = timezone.now()
    SinkPosition.objects.get_or_create(name=sink.name)
    claim = uuid.uuid4().hex
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    taken = SinkPosition.objects.filter(free, due, name=sink.name).update(
        claim=claim, claimed_until=now + timedelta(seconds=CLAIM_SECONDS)
    )
    if not taken:
        return 0
    position = SinkPosition.objects.get(name=sink.name)
    mine = SinkPosition.objects.filter(name=sink.name, claim=claim)
    sent = 0
    try:
        while True:
            events = list(AuditEvent.objects.filter(seq__gt=position.seq).order_by("seq")[:BATCH])
            checkpoints = list(
                Checkpoint.objects.filter(pk__gt=position.checkpoint, seq__lte=events[-1].seq)
                if events
                else Checkpoint.objects.filter(pk__gt=position.checkpoint, seq__lte=position.seq)
            )
            if not events and not checkpoints:
                break
            sink.send(_in_order(events, checkpoints))
            position.seq = events[-1].seq if events else position.seq
            position.checkpoint = checkpoints[-1].pk if checkpoints else position.checkpoint
            delivered = timezone.now()
            held = mine.update(  # the claim renewed with each batch: a long catch-up keeps it
                seq=position.seq,
                checkpoint=position.checkpoint,
                delivered_at=delivered,
                failures=0,
                last_error="",
                next_attempt_at=None,
                claimed_until=delivered + timedelta(seconds=CLAIM_SECONDS),
            )
            if not held:  # taken over (this pass outlived its claim): the other goes on
                return sent
            sent += len(events) + len(checkpoints)
            if len(events) < BATCH:
                break
    except Exception as error:  # a sink down, refusing, unreachable: tried again later
        failures = SinkPosition.objects.get(name=sink.name).failures + 1
        wait = min(2 ** min(failures, 16), MAX_BACKOFF_SECONDS)
        if failures == 1:
            log.warning("audit sink %s failed: %s (retrying)", sink.name, error)
        mine.update(
            failures=failures,
            last_error=f"{type(error).__name__}: {error}"[:2000],
            next_attempt_at=timezone.now() + timedelta(seconds=wait),
        )
    finally:
        mine.update(claim="", claimed_until=None)
    return sent


def _in_order(events: list[AuditEvent], checkpoints: list[Checkpoint]) -> list[dict]:
    """Records in order, each checkpoint right after the record it names."""
    after: dict[int, list[dict]] = {}
    for checkpoint in checkpoints:
        after.setdefault(checkpoint.seq, []).append(as_entry(checkpoint))
    entries = [as_entry(c) for c in checkpoints if not events or c.seq < events[0].seq]
    for event in events:
        entries.append(entry(event))
        entries.extend(after.get(event.seq, []))
    return entries


@dataclass(frozen=True)
class Lag:
    name: str
    seq: int
    head: int
    behind: int
    oldest_unsent: datetime | None
    delivered_at: datetime | None
    failures: int
    last_error: str
    next_attempt_at: datetime | None

    @property
    def seconds(self) -> float:
        """How long the oldest record the sink lacks has waited (0 when it has them all)."""
        if self.oldest_unsent is None:
            return 0.0
        return max((timezone.now() - self.oldest_unsent).total_seconds(), 0.0)


def lags() -> list[Lag]:
    """Each configured sink's position against the chain's head, for the console and metrics."""
    return lags_of(configured())


def lags_of(sinks: list[Sink]) -> list[Lag]:
    head, _ = chain_end()
    names = [sink.name for sink in sinks]
    positions = SinkPosition.objects.in_bulk(names, field_name="name")
    found = []
    for name in names:
        position = positions.get(name) or SinkPosition(name=name)
        oldest = None
        if position.seq < head:
            oldest = (
                AuditEvent.objects.filter(seq=position.seq + 1)
                .values_list("created_at", flat=True)
                .first()
            )
        found.append(
            Lag(
                name=name,
                seq=position.seq,
                head=head,
                behind=head - position.seq,
                oldest_unsent=oldest,
                delivered_at=position.delivered_at,
                failures=position.failures,
                last_error=position.last_error,
                next_attempt_at=position.next_attempt_at,
            )
        )
    return found
