"""The policy's limits on one agent (``max_pending``, ``max_proposals_per_minute``,
``pause_after_rejections``; ``approvals.guard`` enforces them) and its own credential
patterns (``secret_patterns``; ``infrastructure.credentials`` masks what they match)."""

from __future__ import annotations

import re

from rest_framework import serializers

LIMITS = {
    "max_pending": dict(
        min_value=1, max_value=100_000, help_text="pending proposals one agent may have at once"
    ),
    "max_proposals_per_minute": dict(
        min_value=1,
        max_value=100_000,
        help_text="proposals one agent may make a minute (a bucket: a burst of this many)",
    ),
    "pause_after_rejections": dict(
        min_value=0,
        max_value=1000,
        help_text="rejections in a row that pause an agent until an admin resumes it (0 = never)",
    ),
}


def valid_pattern(pattern: str) -> str:
    """A ``secret_patterns`` entry, refused unless it compiles."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise serializers.ValidationError(f"not a regular expression: {exc}") from None
    return pattern
