"""What the Slack tests share: Slack's payloads as it sends them, signed, and what it was sent."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.test import Client
from django.utils import timezone

from approvals.notify.models import ReviewerPreferences, SlackMessage
from tests.standins import interaction_body, slack_signed

SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
INTERACTIVITY = "/slack/interactivity/"
COMMANDS = "/slack/commands/"
ROUTES = [
    {"channel": "#sec-approvals", "bands": ["high"], "agent": "*", "action": "*"},
    {"channel": "#approvals", "bands": [], "agent": "*", "action": "script.*"},
]


def link(user, slack_user: str, team: str = "T1") -> None:
    ReviewerPreferences.objects.update_or_create(
        user=user,
        defaults={
            "slack_team_id": team,
            "slack_user_id": slack_user,
            "slack_linked_at": timezone.now(),
        },
    )


def click(slack, action_id: str, proposal_id: int, user: str = "U100", team: str = "T1") -> dict:
    """A block_actions payload as Slack sends it when a button of our message is clicked."""
    return {
        "type": "block_actions",
        "team": {"id": team, "domain": "example"},
        "user": {"id": user, "username": "someone", "team_id": team},
        "api_app_id": "A0001",
        "trigger_id": "1234.5678.abcdef",
        "response_url": slack.response_url,
        "container": {
            "type": "message",
            "channel_id": "C00000002",
            "message_ts": "1700000000.000100",
        },
        "actions": [
            {
                "type": "button",
                "block_id": "airlock_review",
                "action_id": action_id,
                "value": str(proposal_id),
                "action_ts": "1700000001.000200",
            }
        ],
    }


def submission(proposal_id: int, comment: str, user: str = "U100", team: str = "T1") -> dict:
    """A view_submission payload: the reject modal sent with its comment."""
    return {
        "type": "view_submission",
        "team": {"id": team},
        "user": {"id": user, "team_id": team},
        "view": {
            "id": "V0001",
            "callback_id": "airlock_reject",
            "private_metadata": json.dumps({"proposal": proposal_id}),
            "state": {
                "values": {"comment": {"comment": {"type": "plain_text_input", "value": comment}}}
            },
        },
    }


def send(payload: dict, secret: str = SLACK_SECRET, timestamp: int | None = None):
    return slack_signed(Client(), INTERACTIVITY, interaction_body(payload), secret, timestamp)


def posted(slack) -> list[dict]:
    return slack.called("chat.postMessage")


def current(slack, proposal_id: int) -> list[dict]:
    """What each message about the proposal shows now, in Slack."""
    return [
        slack.messages[(message.channel, message.ts)]
        for message in SlackMessage.objects.filter(proposal_id=proposal_id).order_by("pk")
    ]


def command(text: str, user: str = "U100", team: str = "T1"):
    body = urlencode(
        {"command": "/airlock", "text": text, "user_id": user, "team_id": team, "team_domain": "x"}
    )
    return slack_signed(Client(), COMMANDS, body, SLACK_SECRET)
