"""The policy's own table: every version ever applied, the newest in force."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class PolicyVersion(models.Model):
    """One immutable version of the policy; the newest is in force. Edits add a version."""

    version = models.PositiveIntegerField(unique=True)
    data = models.JSONField()
    comment = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"policy v{self.version}"
