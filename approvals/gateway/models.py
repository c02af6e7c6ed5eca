"""The upstream MCP servers the gateway fronts."""

from __future__ import annotations

from django.db import models


class Upstream(models.Model):
    """One MCP server behind Airlock: started as a command (stdio) or reached at a URL.

    Values in ``env`` and ``headers`` may name Airlock's own environment as
    ``${NAME}``, so a secret need not be kept in the database; the console and
    the audit trail show their names, never their values. A stdio upstream
    runs sandboxed (``connections``): of the host it sees the system
    directories, its installation, and ``read`` / ``write``; of the network,
    only the ``host:port`` pairs ``network`` lists, through a proxy of its own.
    One with an ``image`` runs as a container of it instead, with that proxy.
    """

    class Transport(models.TextChoices):
        STDIO = "stdio"
        HTTP = "http"

    name = models.CharField(max_length=40, unique=True)
    transport = models.CharField(max_length=8, choices=Transport.choices)
    # For stdio: an image to run as a container (no host command, no network), or blank.
    image = models.CharField(max_length=300, blank=True)
    command = models.JSONField(default=list, blank=True)  # argv, for stdio
    env = models.JSONField(default=dict, blank=True)  # for stdio, beside a minimal environment
    # For stdio: the host paths its sandbox shows it, read-only and writable (absolute).
    read = models.JSONField(default=list, blank=True)
    write = models.JSONField(default=list, blank=True)
    network = models.JSONField(default=list, blank=True)  # for stdio: host:port it may reach
    url = models.URLField(max_length=500, blank=True)  # for http
    headers = models.JSONField(default=dict, blank=True)  # for http
    timeout_seconds = models.PositiveIntegerField(default=60)
    enabled = models.BooleanField(default=True)
    description = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
