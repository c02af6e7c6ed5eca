from django.db import models


class AuditEvent(models.Model):
    """One append-only entry of the audit trail.

    ``seq`` is contiguous (assigned under a lock), and ``hash`` is an HMAC over
    the previous row's hash and this row's content, keyed with SECRET_KEY:
    editing, inserting or deleting a row breaks the chain at that row, and the
    chain cannot be recomputed without the key.
    """

    seq = models.PositiveBigIntegerField(unique=True)
    created_at = models.DateTimeField()
    actor = models.CharField(max_length=200)  # "user:alice", "agent:deploy-bot", "system"
    verb = models.CharField(max_length=100)  # "proposal.submitted", "execution.succeeded", …
    object_type = models.CharField(max_length=50, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]
        # Every change appends rows here, and each index is written with them:
        # only what is looked up (an object's history; the admin's verb filter).
        indexes = [
            models.Index(fields=["object_type", "object_id"]),
            models.Index(fields=["verb"]),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.actor} {self.verb} {self.object_type}:{self.object_id}"


class SinkPosition(models.Model):
    """How far one configured sink (``AUDIT_SINKS``) has been sent the chain, and its retry state.

    ``seq`` is the last record the sink acknowledged; records go out in order
    and at least once, so a sink that was down receives everything after it.
    A shipping worker claims the row (``claim``, ``claimed_until``) for a pass,
    so two workers never send one sink records out of order.
    """

    name = models.CharField(max_length=200, unique=True)  # the sink's URL, without credentials
    seq = models.PositiveBigIntegerField(default=0)
    checkpoint = models.PositiveBigIntegerField(default=0)  # last Checkpoint.pk sent
    delivered_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claim = models.CharField(max_length=32, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at #{self.seq}"


class Checkpoint(models.Model):
    """The chain's head at a moment, signed with an Ed25519 key the database does not hold.

    Stored so that the sinks receive it after the record it names; the copy
    that counts is the one outside (the checkpoint file, the sinks): a forged
    row here would need the signing key.
    """

    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    signature = models.CharField(max_length=128)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"checkpoint at #{self.seq}"


class ChainArchive(models.Model):
    """Where the chain's archived part ends: rows up to ``through_seq`` left the database for
    the archive (``RETENTION_AUDIT_DAYS``), and the next row follows ``through_hash``.

    One row (pk 1), written before the rows it covers are deleted. Verifying
    the database starts after it; ``verify_audit --archive`` checks the
    archived rows from the first and that they end here.
    """

    through_seq = models.PositiveBigIntegerField(default=0)
    through_hash = models.CharField(max_length=64)
    location = models.CharField(max_length=500)  # the archive it went to, as shown to people
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"archived through #{self.through_seq}"
