"""Reviewing from Slack, against a local stand-in of Slack's Web API.

Review requests are posted where the policy routes them, with Approve and
Reject; clicks and the reject modal come back signed exactly as Slack signs
them, and decide under the console's rules. Every posted message follows the
proposal: decisions made anywhere, expiry, the end of the run.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from approvals.core.services import expire_pending
from approvals.models import Decision, Proposal
from approvals.notify import deliveries
from approvals.notify.models import Delivery, ReviewerPreferences, SlackMessage
from approvals.notify.tasks import send_delivery
from audit.models import AuditEvent
from console.celery import app as celery_app
from tests.approvals.test_cascade import HIGH, MEDIUM, propose
from tests.conftest import client_for, use_policy, with_fresh_factor
from tests.console.conftest import logged_in
from tests.standins import action_ids, blocks_text

from .slack_support import (
    ROUTES,
    click,
    command,
    current,
    link,
    posted,
    send,
    submission,
)

# --- posting ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_review_request_is_posted_to_the_routed_channel_with_buttons(pending, routed):
    [message] = posted(routed)
    assert message["channel"] == "#approvals"  # medium risk: the first route wants high only
    text = blocks_text(message)
    proposal = Proposal.objects.get(pk=pending["id"])
    assert f"#{proposal.pk} script.execute" in text
    assert proposal.summary in text
    assert f"{proposal.risk_score} (medium)" in text
    assert proposal.risk_reasons[0] in text
    assert "import os" in text and "print(os.listdir('.'))" in text
    assert f"<http://airlock.test/proposals/{proposal.pk}/|Open in Airlock>" in text
    assert action_ids(message) == ["airlock_approve", "airlock_reject"]
    buttons = [b for b in message["blocks"] if b["type"] == "actions"][0]["elements"]
    assert {button["value"] for button in buttons} == {str(proposal.pk)}
    assert "waits for review" in message["text"]
    stored = SlackMessage.objects.get()
    assert (stored.channel, stored.proposal_id) == ("C00000001", proposal.pk)
    delivery = Delivery.objects.get(channel="slack")
    assert (delivery.operation, delivery.state, delivery.target) == (
        "post",
        "delivered",
        "#approvals",
    )


@pytest.mark.django_db
def test_high_risk_goes_to_the_first_route_that_matches(agent_api, routed, eager_tasks):
    with eager_tasks(execute=True):
        propose(agent_api, HIGH)
    assert [m["channel"] for m in posted(routed)] == ["#sec-approvals"]


@pytest.mark.django_db
def test_without_a_matching_route_nothing_is_posted(agent_api, slack, eager_tasks):
    use_policy(
        slack_routes=[{"channel": "#docker", "bands": [], "agent": "*", "action": "docker.*"}]
    )
    with eager_tasks(execute=True):
        propose(agent_api, MEDIUM)
    assert posted(slack) == []
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_long_code_is_trimmed_with_a_link_to_the_full_view(agent_api, routed, eager_tasks):
    code = "import os\n" + "".join(f"print({i})\n" for i in range(60))
    body = {"action": "script.execute", "parameters": {"language": "python", "code": code}}
    with eager_tasks(execute=True):
        proposal = propose(agent_api, body)
    text = blocks_text(posted(routed)[0])
    assert "print(18)" in text and "print(19)" not in text
    assert (
        f"41 more lines in <http://airlock.test/proposals/{proposal['id']}/|the full view>" in text
    )


# --- deciding --------------------------------------------------------------------------


@pytest.mark.django_db
def test_approve_in_slack_decides_and_the_message_is_updated_afterwards(
    pending, routed, reviewer, eager_tasks
):
    link(reviewer, "U100")
    with eager_tasks(execute=True):
        response = send(click(routed, "airlock_approve", pending["id"]))
        assert routed.called("chat.update") == []  # the request only decides
    assert response.status_code == 200
    proposal = Proposal.objects.get(pk=pending["id"])
    assert proposal.status == "approved" and proposal.execution_id
    assert Decision.objects.get().reviewer == reviewer
    event = AuditEvent.objects.get(verb="proposal.decision.approve")
    assert event.actor == "user:rita" and event.data["via"] == "slack"
    [message] = current(routed, proposal.pk)
    text = blocks_text(message)
    assert "Approved" in text and "*rita* approved" in text
    assert f"Execution #{proposal.execution_id}*: queued" in text
    assert action_ids(message) == []


@pytest.mark.django_db
def test_reject_asks_for_a_comment_in_a_modal_then_rejects_with_it(
    pending, routed, reviewer, eager_tasks
):
    link(reviewer, "U100")
    response = send(click(routed, "airlock_reject", pending["id"]))
    assert response.status_code == 200
    [opened] = routed.called("views.open")
    assert opened["trigger_id"] == "1234.5678.abcdef"
    assert opened["view"]["callback_id"] == "airlock_reject"
    assert json.loads(opened["view"]["private_metadata"]) == {"proposal": pending["id"]}
    assert Proposal.objects.get(pk=pending["id"]).status == "pending"  # not yet

    with eager_tasks(execute=True):
        response = send(submission(pending["id"], "not on a Friday"))
    assert (response.status_code, response.content) == (200, b"")  # closes the modal
    proposal = Proposal.objects.get(pk=pending["id"])
    assert proposal.status == "rejected"
    assert Decision.objects.get().comment == "not on a Friday"
    text = blocks_text(current(routed, proposal.pk)[0])
    assert "Rejected" in text and "*rita* rejected: “not on a Friday”" in text


@pytest.mark.django_db
def test_a_quorum_counts_approvals_from_slack_and_the_console(
    agent_api, routed, reviewer, reviewer2, eager_tasks
):
    link(reviewer, "U100")
    with eager_tasks(execute=True):
        body = propose(agent_api, HIGH)
    with eager_tasks(execute=True):
        send(click(routed, "airlock_approve", body["id"]))
    proposal = Proposal.objects.get(pk=body["id"])
    assert (proposal.status, proposal.approvals_count) == ("pending", 1)
    [message] = current(routed, body["id"])
    assert "1 of 2 approvals still needed" in blocks_text(message)
    assert action_ids(message) == ["airlock_approve", "airlock_reject"]

    console = Client()
    console.force_login(reviewer2)
    with eager_tasks(execute=True):
        console.post(reverse("console:decide", args=[body["id"], "approve"]))
    assert Proposal.objects.get(pk=body["id"]).status == "approved"
    [message] = current(routed, body["id"])
    text = blocks_text(message)
    assert "Approved" in text and "*rita* approved" in text and "*ravi* approved" in text
    assert action_ids(message) == []


@pytest.mark.django_db
def test_self_approval_is_refused_from_slack(make_agent, routed, reviewer, eager_tasks):
    _, token = make_agent("mine", ["*"], owner=reviewer)
    link(reviewer, "U100")
    with eager_tasks(execute=True):
        body = propose(client_for(token), MEDIUM)
        response = send(click(routed, "airlock_approve", body["id"]))
    assert response.status_code == 200
    assert not Decision.objects.exists()
    assert Proposal.objects.get(pk=body["id"]).status == "pending"
    [answer] = routed.called("response_url")
    assert answer["response_type"] == "ephemeral" and answer["replace_original"] is False
    assert "owns agent mine and cannot decide its proposals" in answer["text"]


@pytest.mark.django_db
def test_a_second_decision_by_the_same_reviewer_is_refused(
    agent_api, routed, reviewer, eager_tasks
):
    link(reviewer, "U100")
    with eager_tasks(execute=True):
        body = propose(agent_api, HIGH)
        send(click(routed, "airlock_approve", body["id"]))
        send(click(routed, "airlock_approve", body["id"]))
        modal = send(submission(body["id"], "changed my mind"))
    assert Decision.objects.count() == 1
    [answer] = routed.called("response_url")
    assert "rita has already decided" in answer["text"]
    assert modal.json() == {
        "response_action": "errors",
        "errors": {"comment": f"rita has already decided proposal {body['id']}"},
    }


@pytest.mark.django_db
def test_an_expired_proposal_cannot_be_approved_from_slack(pending, routed, reviewer, eager_tasks):
    link(reviewer, "U100")
    Proposal.objects.filter(pk=pending["id"]).update(expires_at=timezone.now() - timedelta(1))
    with eager_tasks(execute=True):
        send(click(routed, "airlock_approve", pending["id"]))
    assert not Decision.objects.exists()
    assert Proposal.objects.get(pk=pending["id"]).status == "expired"
    assert "expired before the decision" in routed.called("response_url")[0]["text"]


@pytest.mark.django_db
def test_a_linked_user_without_review_rights_is_refused(pending, routed, outsider, eager_tasks):
    link(outsider, "U300")
    with eager_tasks(execute=True):
        send(click(routed, "airlock_approve", pending["id"], user="U300"))
    assert not Decision.objects.exists()
    assert "only reviewers can approve" in routed.called("response_url")[0]["text"]


# --- linking ------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_unlinked_user_is_told_how_to_link(pending, routed, eager_tasks):
    with eager_tasks(execute=True):
        response = send(click(routed, "airlock_approve", pending["id"], user="U999"))
        modal = send(submission(pending["id"], "no", user="U999"))
    assert response.status_code == 200
    assert not Decision.objects.exists()
    [answer] = routed.called("response_url")
    assert answer["response_type"] == "ephemeral"
    assert "not linked to an Airlock reviewer" in answer["text"]
    assert (
        "http://airlock.test/profile/" in answer["text"] and "/airlock link CODE" in answer["text"]
    )
    assert "not linked" in modal.json()["errors"]["comment"]


@pytest.mark.django_db
def test_a_link_is_for_one_workspace(pending, routed, reviewer, eager_tasks):
    link(reviewer, "U100", team="T1")
    with eager_tasks(execute=True):
        send(click(routed, "airlock_approve", pending["id"], team="T2"))
    assert not Decision.objects.exists()
    assert "not linked" in routed.called("response_url")[0]["text"]


def code_from_profile(client) -> str:
    html = client.post(reverse("console:profile-slack-code")).content.decode()
    return html.split('id="link-code">/airlock link ')[1].split("<")[0]


@pytest.mark.django_db
def test_a_reviewer_links_slack_with_a_code_from_their_profile(slack, reviewer, reviewer2):
    console = Client()
    console.force_login(reviewer)
    code = code_from_profile(console)
    assert len(code) == 9 and code[4] == "-"
    assert ReviewerPreferences.objects.get(user=reviewer).link_code_hash != code

    answer = command(f"link {code.lower()}")
    assert answer.json()["response_type"] == "ephemeral"
    assert "you review as *rita*" in answer.json()["text"]
    preferences = ReviewerPreferences.objects.get(user=reviewer)
    assert (preferences.slack_team_id, preferences.slack_user_id) == ("T1", "U100")
    assert AuditEvent.objects.filter(verb="slack.linked", actor="user:rita").exists()
    assert "Linked to Slack user <code>U100</code>" in console.get("/profile/").content.decode()

    again = command(f"link {code}", user="U200")  # a code works once
    assert "unknown or expired" in again.json()["text"]

    other = Client()
    other.force_login(reviewer2)
    moved = command(f"link {code_from_profile(other)}")  # the same Slack user, another reviewer
    assert "you review as *ravi*" in moved.json()["text"]
    assert ReviewerPreferences.objects.get(user=reviewer).slack_user_id == ""


@pytest.mark.django_db
def test_an_expired_code_does_not_link(slack, reviewer):
    console = Client()
    console.force_login(reviewer)
    code = code_from_profile(console)
    ReviewerPreferences.objects.filter(user=reviewer).update(
        link_code_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert "unknown or expired" in command(f"link {code}").json()["text"]
    assert ReviewerPreferences.objects.get(user=reviewer).slack_user_id == ""


@pytest.mark.django_db
def test_unlinking_from_slack_and_from_the_profile(slack, reviewer):
    link(reviewer, "U100")
    assert "no longer reviews as *rita*" in command("unlink").json()["text"]
    assert "not linked" in command("unlink").json()["text"]
    link(reviewer, "U100")
    console = Client()
    console.force_login(reviewer)
    console.post(reverse("console:profile-slack-unlink"))
    assert ReviewerPreferences.objects.get(user=reviewer).slack_user_id == ""
    assert "Usage:" in command("help").json()["text"]


# --- messages follow the proposal ------------------------------------------------------


@pytest.mark.django_db
def test_expiry_updates_the_message_in_place(pending, routed, eager_tasks):
    Proposal.objects.filter(pk=pending["id"]).update(expires_at=timezone.now() - timedelta(1))
    with eager_tasks(execute=True):
        assert expire_pending() == 1
    [update] = routed.called("chat.update")
    assert update["channel"] == "C00000001" and update["ts"] == SlackMessage.objects.get().ts
    assert "Expired" in blocks_text(update) and action_ids(update) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("local_sandbox")
def test_the_end_of_the_run_updates_the_message_with_its_exit_code_and_output_link(
    agent_api, slack, reviewer, monkeypatch
):
    from executions import services as executions

    use_policy(slack_routes=ROUTES)
    link(reviewer, "U100")
    monkeypatch.setattr("executions.services.enqueue", lambda execution_id, queue: False)
    celery_app.conf.task_always_eager = True
    try:
        body = propose(agent_api, MEDIUM)
        send(click(slack, "airlock_approve", body["id"]))
        execution_id = Proposal.objects.get(pk=body["id"]).execution_id
        executions.run(execution_id)
    finally:
        celery_app.conf.task_always_eager = False
    text = blocks_text(current(slack, body["id"])[0])
    assert f"Execution #{execution_id}*: succeeded, exit code 0" in text
    assert f"<http://airlock.test/executions/{execution_id}/|output>" in text
    events = Delivery.objects.filter(channel="slack").values_list("event", flat=True)
    assert set(events) == {"review_requested", "decided", "execution_ended"}


# --- direct messages and preferences ----------------------------------------------------


@pytest.mark.django_db
def test_reviewers_who_want_slack_get_a_direct_message_within_their_bands(
    agent_api, slack, reviewer, reviewer2, eager_tasks
):
    link(reviewer, "U100")
    link(reviewer2, "U200")
    ReviewerPreferences.objects.filter(user=reviewer).update(slack=True)
    ReviewerPreferences.objects.filter(user=reviewer2).update(slack=True, bands=["high"])
    with eager_tasks(execute=True):
        propose(agent_api, MEDIUM)
    assert [m["channel"] for m in posted(slack)] == ["U100"]
    assert SlackMessage.objects.get().recipient == reviewer


@pytest.mark.django_db
def test_quiet_hours_hold_direct_messages(agent_api, slack, reviewer, eager_tasks):
    link(reviewer, "U100")
    now = timezone.now().astimezone(timezone.get_current_timezone())
    start = (now - timedelta(hours=1)).time()
    end = (now + timedelta(hours=1)).time()
    ReviewerPreferences.objects.filter(user=reviewer).update(
        slack=True, quiet_from=start, quiet_until=end
    )
    with eager_tasks(execute=True):
        propose(agent_api, MEDIUM)
    assert posted(slack) == []


@pytest.mark.django_db
def test_without_a_bot_token_slack_is_left_alone(agent_api, slack, settings, eager_tasks):
    settings.SLACK_BOT_TOKEN = ""
    use_policy(slack_routes=ROUTES)
    with eager_tasks(execute=True):
        propose(agent_api, MEDIUM)
    assert slack.calls == []


# --- failures are logged, retried, and never cost a decision ---------------------------


@pytest.mark.django_db
def test_a_refused_post_is_logged_then_retried_with_backoff(
    agent_api, routed, eager_tasks, monkeypatch
):
    scheduled = []
    monkeypatch.setattr(
        deliveries, "schedule_retry", lambda log, pk, delay: scheduled.append(delay)
    )
    routed.fail("chat.postMessage", (200, {"ok": False, "error": "channel_not_found"}), (500, {}))
    with eager_tasks(execute=True):
        propose(agent_api, MEDIUM)
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts) == ("pending", 1)
    assert delivery.error == "Slack refused: channel_not_found"
    delivery = deliveries.attempt(Delivery, delivery.pk, send_delivery)
    assert (delivery.state, delivery.attempts, delivery.error) == (
        "pending",
        2,
        "Slack refused: HTTP 500",
    )
    delivery = deliveries.attempt(Delivery, delivery.pk, send_delivery)
    assert (delivery.state, delivery.attempts, delivery.error) == ("delivered", 3, "")
    assert scheduled == [10, 20]
    assert len(posted(routed)) == 3 and SlackMessage.objects.count() == 1


@pytest.mark.django_db
def test_slack_down_does_not_cost_the_decision(pending, routed, reviewer, eager_tasks, monkeypatch):
    monkeypatch.setattr(deliveries, "schedule_retry", lambda log, pk, delay: None)
    link(reviewer, "U100")
    routed.stop()  # nothing answers from here on
    with eager_tasks(execute=True):
        response = send(click(routed, "airlock_approve", pending["id"]))
    assert response.status_code == 200
    assert Proposal.objects.get(pk=pending["id"]).status == "approved"
    update = Delivery.objects.get(operation="update")
    assert update.state == "pending" and "URLError" in update.error


@pytest.mark.django_db
def test_a_delivery_given_up_on_ends_failed(pending, routed, monkeypatch):
    monkeypatch.setattr(deliveries, "schedule_retry", lambda log, pk, delay: None)
    message = SlackMessage.objects.get()
    routed.messages.clear()  # deleted in Slack
    delivery = Delivery.objects.create(
        channel="slack", operation="update", event="decided", proposal_id=pending["id"],
        target=message.channel, slack_message=message,
    )  # fmt: skip
    for _ in range(deliveries.MAX_ATTEMPTS):
        delivery = deliveries.attempt(Delivery, delivery.pk, send_delivery)
    assert (delivery.state, delivery.attempts) == ("failed", deliveries.MAX_ATTEMPTS)
    assert delivery.error == "Slack refused: message_not_found"
    assert (
        deliveries.attempt(Delivery, delivery.pk, send_delivery).attempts == deliveries.MAX_ATTEMPTS
    )  # left alone


@pytest.mark.django_db
def test_the_sweep_retries_what_is_due(pending, routed, monkeypatch):
    monkeypatch.setattr(deliveries, "schedule_retry", lambda log, pk, delay: None)
    message = SlackMessage.objects.get()
    due = Delivery.objects.create(
        channel="slack", operation="update", event="decided", proposal_id=pending["id"],
        target=message.channel, slack_message=message, attempts=1,
        next_attempt_at=timezone.now() - timedelta(seconds=1),
    )  # fmt: skip
    later = Delivery.objects.create(
        channel="slack", operation="update", event="decided", proposal_id=pending["id"],
        target=message.channel, slack_message=message, attempts=1,
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )  # fmt: skip
    assert deliveries.retry_due(Delivery, send_delivery) == 1
    assert Delivery.objects.get(pk=due.pk).state == "delivered"
    assert Delivery.objects.get(pk=later.pk).state == "pending"


@pytest.mark.django_db
def test_an_update_overtaken_by_a_newer_state_is_followed_by_the_newer_one(pending, routed):
    from approvals.notify.slack import notifier
    from approvals.notify.slack.messages import load, render

    message = SlackMessage.objects.get()
    rendered_before = render(load(pending["id"]), reviewable=True)
    Proposal.objects.filter(pk=pending["id"]).update(status="rejected")  # decided meanwhile
    notifier._catch_up(message, rendered_before)
    shown = routed.messages[(message.channel, message.ts)]
    assert "Rejected" in blocks_text(shown) and action_ids(shown) == []
    notifier._catch_up(message, render(load(pending["id"]), reviewable=True))
    assert len(routed.called("chat.update")) == 1  # nothing moved: nothing sent


@pytest.mark.django_db
def test_a_high_risk_approval_from_slack_is_sent_to_the_console_to_step_up(
    agent_api, routed, reviewer, eager_tasks, settings
):
    settings.STEP_UP_MIN_RISK = 7  # the default: on for this test
    with eager_tasks(execute=True):
        proposal = propose(agent_api, HIGH)
    link(reviewer, "U100")
    with eager_tasks(execute=True):
        response = send(click(routed, "airlock_approve", proposal["id"]))
    assert response.status_code == 200
    assert Proposal.objects.get(pk=proposal["id"]).status == "pending"
    [reply] = routed.called("response_url")
    assert "second factor" in reply["text"]
    url = f"/proposals/{proposal['id']}/approve/"
    assert f"{settings.SITE_URL}{url}" in reply["text"]
    console = logged_in(reviewer, stepped_up=False)  # the link, opened in the console
    assert console.post(url, {"comment": "from slack"})["Location"].startswith("/step-up/")
    assert Proposal.objects.get(pk=proposal["id"]).approvals_count == 0
    with eager_tasks(execute=True):
        with_fresh_factor(console, reviewer).post(url, {"comment": "from slack"})
    assert Proposal.objects.get(pk=proposal["id"]).approvals_count == 1
