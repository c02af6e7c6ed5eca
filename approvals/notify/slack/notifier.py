"""``SlackNotifier``: posts review requests, then keeps each posted message current.

Where a message goes: the channel of the first matching route in the policy
(``slack_routes``), and a direct message to each linked reviewer who asked
for Slack in their preferences (risk bands and quiet hours honoured). Every
later event about the proposal (an approval, the decision, expiry, the end of
the run) updates those messages in place. Each post and update is a row of
the delivery log, retried with backoff when Slack is unreachable or refuses.
"""

from __future__ import annotations

import json
import logging

from django.utils import timezone
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.webhook import WebhookClient

from accounts.roles import reviewers
from approvals.core.services import may_decide
from approvals.models import Proposal
from approvals.notify import deliveries
from approvals.notify.base import FOLLOW_UPS, REVIEW_KINDS, TOLD, Event, Notifier, teams_told
from approvals.notify.models import Delivery, ReviewerPreferences, SlackMessage
from approvals.notify.slack import client, configured
from approvals.notify.slack.messages import load, render
from approvals.policy.rules import current_policy
from approvals.routing.membership import in_any

log = logging.getLogger(__name__)

POSTED = frozenset({"review_requested", "notify_list", "escalated"})
# A late update must not leave an older state on screen: re-render after each
# send and send again while the proposal moved meanwhile (bounded).
CATCH_UP_ROUNDS = 3


class SlackNotifier(Notifier):
    """Review requests and their outcome in Slack; does nothing without SLACK_BOT_TOKEN."""

    kinds = TOLD | FOLLOW_UPS

    def wants(self, kind: str) -> bool:
        return configured() and kind in self.kinds

    def send(self, event: Event) -> None:
        if event.kind in POSTED:
            proposal = Proposal.objects.select_related("agent").get(pk=event.proposal_id)
            for target, recipient in targets(proposal, event.kind):
                deliveries.record(
                    Delivery,
                    deliver,
                    channel=Delivery.Channel.SLACK,
                    operation=Delivery.Operation.POST,
                    event=event.kind,
                    proposal=proposal,
                    recipient=recipient,
                    target=target,
                )
            return
        for message in SlackMessage.objects.filter(proposal_id=event.proposal_id):
            deliveries.record(
                Delivery,
                deliver,
                channel=Delivery.Channel.SLACK,
                operation=Delivery.Operation.UPDATE,
                event=event.kind,
                proposal_id=event.proposal_id,
                recipient_id=message.recipient_id,
                target=message.channel,
                slack_message=message,
            )


def targets(proposal: Proposal, kind: str) -> list[tuple[str, object]]:
    """(channel or Slack user id, the person for a direct message or None) to post to."""
    policy, found = current_policy(), []
    channels = team_channels(policy, proposal, kind) or [
        policy.slack_channel_for(proposal.agent.name, proposal.action, proposal.risk_score)
    ]
    found += [(channel, None) for channel in channels if channel]
    now = timezone.now()
    wanting = (
        ReviewerPreferences.objects.filter(slack=True, user__in=reviewers())
        .exclude(slack_user_id="")
        .select_related("user")
        .order_by("user__username")
    )
    for preferences in wanting:
        person = preferences.user
        if not preferences.wants("slack", proposal.risk_score, now):
            continue
        if kind in ("review_requested", "escalated") and not may_decide(person, proposal):
            continue
        if kind == "escalated" and not in_any(person, policy.teams, teams_told(kind, proposal)):
            continue  # the silent team was asked already: this is for the teams it goes to
        found.append((preferences.slack_user_id, person))
    return found


def team_channels(policy, proposal: Proposal, kind: str) -> list[str]:
    """A routed proposal's teams' channels (those it escalates to, once escalated): there,
    not in the Slack routes' channel, its review is asked for."""
    teams = teams_told(kind, proposal)
    channels = (policy.teams[t].slack_channel for t in teams if t in policy.teams)
    return list(dict.fromkeys(channel for channel in channels if channel))


def deliver(delivery: Delivery) -> None:
    """Post the message, or bring it up to date; ``DeliveryFailed`` with Slack's reason."""
    if delivery.proposal_id is None:
        raise deliveries.DeliveryFailed("the proposal no longer exists")
    try:
        if delivery.slack_message is None:
            sent = _post(delivery)
        else:
            sent = _update(delivery.slack_message)
        delivery.body = json.dumps(sent)
        _catch_up(delivery.slack_message, sent)
    except SlackApiError as exc:
        reason = exc.response.get("error") or f"HTTP {exc.response.status_code}"
        raise deliveries.DeliveryFailed(f"Slack refused: {reason}") from None
    except (SlackClientError, OSError) as exc:
        raise deliveries.DeliveryFailed(f"{type(exc).__name__}: {exc}") from None


def _post(delivery: Delivery) -> dict:
    message = render(load(delivery.proposal_id), reviewable=delivery.event in REVIEW_KINDS)
    answer = client().chat_postMessage(channel=delivery.target, **message)
    delivery.slack_message = SlackMessage.objects.create(
        proposal_id=delivery.proposal_id,
        event=delivery.event,
        channel=answer["channel"],
        ts=answer["ts"],
        recipient_id=delivery.recipient_id,
    )
    return message


def _update(slack_message: SlackMessage) -> dict:
    message = render(load(slack_message.proposal_id), slack_message.reviewable)
    client().chat_update(channel=slack_message.channel, ts=slack_message.ts, **message)
    return message


def _catch_up(slack_message: SlackMessage, sent: dict) -> None:
    for _ in range(CATCH_UP_ROUNDS):
        now = render(load(slack_message.proposal_id), slack_message.reviewable)
        if now == sent:
            return
        client().chat_update(channel=slack_message.channel, ts=slack_message.ts, **now)
        sent = now


def reply(response_url: str, text: str) -> None:
    """An ephemeral answer to the person who clicked, through the interaction's response_url."""
    try:
        WebhookClient(response_url, timeout=5).send(
            text=text, response_type="ephemeral", replace_original=False
        )
    except (SlackClientError, OSError):
        log.exception("could not answer a Slack interaction")
