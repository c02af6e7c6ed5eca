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
