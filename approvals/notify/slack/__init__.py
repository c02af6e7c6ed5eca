"""Slack: review requests as messages with Approve and Reject, decided where reviewers chat.

- ``notifier`` — ``SlackNotifier`` posts review requests to the channel the
  policy's ``slack_routes`` name and as direct messages to reviewers who asked
  for them, and keeps every posted message up to date in place.
- ``messages`` — the Block Kit message, rendered from the proposal as it is.
- ``views`` — the interactivity and slash-command endpoints: signed requests
  only; decisions go through ``core.services.decide`` like the console's.
- ``linking`` — a reviewer links their Slack account by typing a one-time
  code from their profile into ``/airlock link``.
"""

from __future__ import annotations

from django.conf import settings
from slack_sdk import WebClient

# The task that answers an interaction later (notify/tasks.py, which imports this package).
REPLY_TASK = "approvals.tasks.slack_reply"


def configured() -> bool:
    return bool(settings.SLACK_BOT_TOKEN)


def client() -> WebClient:
    return WebClient(
        token=settings.SLACK_BOT_TOKEN,
        base_url=settings.SLACK_API_URL,
        timeout=settings.SLACK_TIMEOUT_SECONDS,
    )
