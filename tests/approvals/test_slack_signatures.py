"""Slack's requests are taken only when Slack signed them just now, and well formed.

Against the same local stand-in of Slack as ``test_slack``: a click or a
command that is unsigned, signed with another secret, stale, from the future
or tampered with gets a 401 and decides nothing; a signed but malformed
payload gets a 400.
"""

from __future__ import annotations

import time

import pytest
from django.test import Client

from approvals.models import Decision, Proposal
from tests.approvals.slack_support import COMMANDS, INTERACTIVITY, click, link, send
from tests.standins import interaction_body, slack_signed

from .slack_support import SLACK_SECRET


def _wrong_secret(payload):
    return send(payload, secret="not-the-secret")


def _stale(payload):
    return send(payload, timestamp=int(time.time()) - 6 * 60)


def _from_the_future(payload):
    return send(payload, timestamp=int(time.time()) + 6 * 60)


def _unsigned(payload):
    return Client().post(
        INTERACTIVITY, interaction_body(payload), content_type="application/x-www-form-urlencoded"
    )


def _tampered(payload):
    stamp = str(int(time.time()))
    from tests.standins import slack_signature

    signature = slack_signature(SLACK_SECRET, stamp, interaction_body({**payload, "x": 1}))
    return Client().post(
        INTERACTIVITY,
        interaction_body(payload),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp,
        HTTP_X_SLACK_SIGNATURE=signature,
    )


def _not_a_number(payload):
    return Client().post(
        INTERACTIVITY,
        interaction_body(payload),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP="soon",
        HTTP_X_SLACK_SIGNATURE="v0=00",
    )


REFUSALS = [_wrong_secret, _stale, _from_the_future, _unsigned, _tampered, _not_a_number]


@pytest.mark.django_db
@pytest.mark.parametrize("request_", REFUSALS, ids=[f.__name__.strip("_") for f in REFUSALS])
def test_a_request_slack_did_not_sign_just_now_gets_401_and_nothing_is_decided(
    pending, routed, reviewer, eager_tasks, request_
):
    link(reviewer, "U100")
    calls = len(routed.calls)
    with eager_tasks(execute=True):
        response = request_(click(routed, "airlock_approve", pending["id"]))
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "invalid_signature"
    assert not Decision.objects.exists()
    assert Proposal.objects.get(pk=pending["id"]).status == "pending"
    assert len(routed.calls) == calls  # no update, no answer, no modal


@pytest.mark.django_db
def test_the_stale_refusal_says_why(pending, routed):
    response = _stale(click(routed, "airlock_approve", pending["id"]))
    assert "more than 5 minutes old" in response.json()["error"]["message"]


@pytest.mark.django_db
def test_a_slash_command_is_checked_the_same_way(slack):
    body = "command=%2Fairlock&text=link+ABCD-EFGH&user_id=U100&team_id=T1"
    assert slack_signed(Client(), COMMANDS, body, "wrong").status_code == 401
    stale = slack_signed(Client(), COMMANDS, body, SLACK_SECRET, int(time.time()) - 301)
    assert stale.status_code == 401


@pytest.mark.django_db
@pytest.mark.server_error_expected("503: Slack is not configured")
def test_without_a_signing_secret_the_endpoints_are_unavailable(settings):
    settings.SLACK_SIGNING_SECRET = ""
    response = slack_signed(Client(), INTERACTIVITY, "payload=%7B%7D", "")
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "not_configured"


@pytest.mark.django_db
def test_the_endpoints_take_only_post(slack):
    assert Client().get(INTERACTIVITY).status_code == 405
    assert Client().get(COMMANDS).status_code == 405


BAD_PAYLOADS = [
    "payload=not-json",
    "payload=%5B1%2C2%5D",
    "nothing=here",
    interaction_body({"type": "block_actions", "user": {"id": "U100"}}),
    interaction_body(
        {
            "type": "block_actions",
            "user": {"id": "U100"},
            "actions": [{"action_id": "airlock_approve", "value": "seven"}],
        }
    ),
    interaction_body(
        {"type": "block_actions", "actions": [{"action_id": "airlock_approve", "value": "7"}]}
    ),
    interaction_body({"type": "view_submission", "view": {"callback_id": "airlock_reject"}}),
    interaction_body(
        {
            "type": "view_submission",
            "user": {"id": "U100"},
            "view": {"callback_id": "airlock_reject", "private_metadata": "{not json"},
        }
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize("body", BAD_PAYLOADS)
def test_a_signed_but_malformed_payload_gets_400(slack, reviewer, body):
    link(reviewer, "U100")
    response = slack_signed(Client(), INTERACTIVITY, body, SLACK_SECRET)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "parse_error"
    assert not Decision.objects.exists()
