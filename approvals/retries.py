"""The retry policy of every outgoing message: webhooks, mail and Slack."""

from __future__ import annotations

MAX_ATTEMPTS = 5
BACKOFF_SECONDS = 10  # 10 s, 20 s, 40 s, 80 s between attempts


def retry_delay(attempts: int) -> int | None:
    """Seconds until the next attempt after ``attempts`` failed ones; None: give up."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return BACKOFF_SECONDS * 2 ** (attempts - 1)
