"""What a sink is, and what it carries."""

from __future__ import annotations

from abc import ABC, abstractmethod
from urllib.parse import parse_qs, urlsplit, urlunsplit

from django.conf import settings

from audit.models import AuditEvent


class Sink(ABC):
    """One place the audit trail is sent to.

    ``send`` delivers a batch of entries (records, then the checkpoints that
    name them; see ``entry``) in order, and returns only once the receiver
    has them: any failure raises, and the batch is sent again later.
    """

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.url = url
        self.parts = parts
        self.options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        # Positions are kept by name: the URL without its credentials or options.
        self.netloc = parts.hostname or ""
        if parts.port:
            self.netloc += f":{parts.port}"
        self.name = urlunsplit((parts.scheme, self.netloc, parts.path, "", ""))
        self.hostname = settings.WORKER_HOSTNAME  # this host, as receivers name the sender

    @abstractmethod
    def send(self, entries: list[dict]) -> None: ...


def moment(entry: dict) -> str:
    """When an entry happened: a record's ``created_at``, a checkpoint's ``at`` (ISO 8601)."""
    return entry.get("created_at") or entry["at"]


def entry(event: AuditEvent) -> dict:
    """A record as every sink carries it: all a verifier needs to follow the chain."""
    return {
        "type": "audit",
        "seq": event.seq,
        "created_at": event.created_at.isoformat(),
        "actor": event.actor,
        "verb": event.verb,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "data": event.data,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }
