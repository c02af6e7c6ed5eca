"""The console's side of pausing agents and of withdrawn proposals: the agents page (one agent,
every agent at once), what reviewers are told, a withdrawn proposal's page, the policy's limits."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from approvals.choices import ProposalStatus
from approvals.core import pausing, tokens, withdrawal
from approvals.core.tokens import create_user_token
from approvals.models import Agent
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import DEFAULT_POLICY, OVERRIDABLE, current_policy, update_policy
from approvals.review.forms import OverrideForm
from audit.models import AuditEvent
from tests.conftest import client_for

from .conftest import logged_in, pending_proposal
from .test_admin_pages import editor_post
from .test_queue_consumer import connect, receive_until


def agent_url(agent: Agent, operation: str) -> str:
    return reverse("console:agent-action", args=[agent.pk, operation])


def every_agent_url(operation: str) -> str:
    return reverse("console:agents-all", args=[operation])


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def paused_names() -> list[str]:
    return list(Agent.objects.filter(paused_at__isnull=False).values_list("name", flat=True))


# --- one agent ------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_admin_pauses_an_agent_and_resumes_it(admin_client_, agent):
    response = admin_client_.post(agent_url(agent, "pause"), {"reason": "runaway loop"})
    assert response.status_code == 302
    assert response["Location"] == reverse("console:agents") + f"#agent-{agent.name}"
    agent.refresh_from_db()
    assert agent.paused_at is not None
    assert (agent.paused_by, agent.pause_reason) == ("user:ada", "runaway loop")

    page = admin_client_.get(response["Location"])
    assert messages_of(page) == [
        f"Paused {agent.name}: its proposals are refused until an admin resumes it."
    ]
    row = row_of(page.content.decode(), agent.name)
    assert "status-paused" in row and "by user:ada" in row and "runaway loop" in row
    assert agent_url(agent, "resume") in row and agent_url(agent, "pause") not in row

    again = admin_client_.post(agent_url(agent, "pause"), {"reason": "twice"}, follow=True)
    assert messages_of(again) == [f"{agent.name} was already paused: nothing changed."]

    resumed = admin_client_.post(agent_url(agent, "resume"), {"reason": "fixed"}, follow=True)
    assert messages_of(resumed) == [f"Resumed {agent.name}."]
    agent.refresh_from_db()
    assert agent.paused_at is None and agent.paused_by == "" and agent.resumed_at is not None


@pytest.mark.django_db
def test_the_audit_says_who_paused_why_and_how_they_proved_it(admin_client_, agent):
    admin_client_.post(agent_url(agent, "pause"), {"reason": "runaway loop"})
    admin_client_.post(every_agent_url("resume"), {"reason": "all clear"})
    paused = AuditEvent.objects.get(verb="agent.paused")
    assert paused.actor == "user:ada" and paused.object_id == str(agent.pk)
    assert paused.data["reason"] == "runaway loop" and paused.data["via"] == "console"
    assert paused.data["every_agent"] is False
    assert paused.data["auth"]["factor"] == "totp" and paused.data["auth"]["fresh"] is True
    resumed = AuditEvent.objects.get(verb="agent.resumed")
    assert resumed.actor == "user:ada" and resumed.data["reason"] == "all clear"
    assert resumed.data["every_agent"] is True and resumed.data["via"] == "console"


@pytest.mark.django_db
def test_without_a_fresh_factor_the_admin_steps_up_and_comes_back_with_the_reason(
    admin_user, agent
):
    client = logged_in(admin_user, stepped_up=False)
    response = client.post(agent_url(agent, "pause"), {"reason": "runaway loop"})
    assert response.status_code == 302
    step_up = urlsplit(response["Location"])
    assert step_up.path == reverse("accounts:step-up")
    back = parse_qs(step_up.query)["next"][0]
    assert back == reverse("console:agents") + f"?reason=runaway+loop#agent-{agent.name}"
    assert paused_names() == []

    every = client.post(every_agent_url("pause"), {"reason": "incident 7"})
    back = parse_qs(urlsplit(every["Location"]).query)["next"][0]
    assert back == reverse("console:agents") + "?reason=incident+7#kill-switch"
    assert paused_names() == [] and not AuditEvent.objects.filter(verb="agent.paused").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("operation", ["pause", "resume"])
def test_reviewers_may_not_pause_or_resume(reviewer, agent, operation):
    if operation == "resume":
        pausing.pause([agent.name], "user:ada", "held")
    before = paused_names()
    client = logged_in(reviewer)
    assert client.post(agent_url(agent, operation), {"reason": "x"}).status_code == 403
    assert client.post(every_agent_url(operation), {"reason": "x"}).status_code == 403
    assert paused_names() == before


@pytest.mark.django_db
def test_an_unknown_operation_is_not_found(admin_client_, agent):
    assert admin_client_.post(agent_url(agent, "explode")).status_code == 404
    assert admin_client_.post(every_agent_url("explode")).status_code == 404
    assert paused_names() == []


# --- every agent: the kill switch ---------------------------------------------------------


@pytest.mark.django_db
def test_the_kill_switch_pauses_every_active_agent_and_resumes_them(admin_client_, make_agent):
    for name in ("alpha", "bravo", "charlie", "delta"):
        make_agent(name)
    pausing.pause(["bravo"], "user:ada", "earlier")
    tokens.set_agent_active(Agent.objects.get(name="delta"), False, "user:ada")

    response = admin_client_.post(every_agent_url("pause"), {"reason": "incident 7"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("console:agents") + "#kill-switch"
    assert messages_of(response) == ["Paused 2 agents: alpha, charlie."]
    assert sorted(paused_names()) == ["alpha", "bravo", "charlie"]  # a revoked one is left
    assert Agent.objects.get(name="bravo").pause_reason == "earlier"
    html = response.content.decode()
    assert "3 of 3 active agents paused" in html

    again = admin_client_.post(every_agent_url("pause"), {"reason": "again"}, follow=True)
    assert messages_of(again) == ["Nothing to pause: every agent was already paused."]

    resumed = admin_client_.post(every_agent_url("resume"), {"reason": "over"}, follow=True)
    assert messages_of(resumed) == ["Resumed 3 agents: alpha, bravo, charlie."]
    assert paused_names() == []
    nothing = admin_client_.post(every_agent_url("resume"), {}, follow=True)
    assert messages_of(nothing) == ["Nothing to resume: no agent was paused."]


@pytest.mark.django_db
def test_a_reason_too_long_changes_nothing(admin_client_, agent):
    response = admin_client_.post(every_agent_url("pause"), {"reason": "x" * 501}, follow=True)
    assert messages_of(response)[0].startswith("The reason: Ensure this value has at most 500")
    assert paused_names() == []


# --- the page ----------------------------------------------------------------------------


def row_of(html: str, name: str) -> str:
    return html[html.index(f'<tr id="agent-{name}"') :].split("</tr>")[0]


@pytest.mark.django_db
def test_the_page_shows_each_agents_state_pending_count_and_limits(
    admin_client_, admin_user, make_agent
):
    bot, _ = make_agent("bot")
    quiet, _ = make_agent("quiet")
    gone, _ = make_agent("gone")
    tokens.set_agent_active(gone, False, "user:ada")
    pending_proposal(bot)
    pending_proposal(bot)
    pending_proposal(quiet, status=ProposalStatus.REJECTED)
    update_policy(
        {**DEFAULT_POLICY, "agent_overrides": {"bot": {"max_pending": 7}}},
        admin_user,
        "tighter for bot",
    )
    reason = "5 rejections in a row (pause_after_rejections), the last proposal 3"
    Agent.objects.filter(pk=bot.pk).update(
        paused_at=quiet.created_at, paused_by=pausing.POLICY, pause_reason=reason
    )
    html = admin_client_.get(reverse("console:agents")).content.decode()
    row = row_of(html, "bot")
    assert "status-paused" in row and "by the policy" in row and reason in row
    assert "<strong>2</strong> pending" in row and "of at most 7" in row
    assert "paused after 5 rejections in a row" in row
    quiet_row = row_of(html, "quiet")
    assert "status-active" in quiet_row and "<strong>0</strong> pending" in quiet_row
    assert "of at most 100" in quiet_row and agent_url(quiet, "pause") in quiet_row
    gone_row = row_of(html, "gone")
    assert 'status-rejected">revoked<' in gone_row
    assert agent_url(gone, "pause") not in gone_row and agent_url(gone, "resume") not in gone_row
    assert 'id="kill-switch"' in html and "1 of 2 active agents paused" in html


@pytest.mark.django_db
def test_the_api_s_step_up_link_opens_the_page_with_the_reason_filled_in(admin_user, agent):
    api = client_for(create_user_token(admin_user))
    for path, anchor in (
        (f"/api/v1/agents/{agent.name}/pause", f"agent-{agent.name}"),
        ("/api/v1/agents/pause", "kill-switch"),
    ):
        answer = api.post(path, {"reason": "loops on deploy"}, format="json")
        assert answer.status_code == 403
        url = answer.json()["error"]["url"]
        assert url.startswith(settings.SITE_URL) and url.endswith(f"#{anchor}")
        html = logged_in(admin_user).get(url.removeprefix(settings.SITE_URL)).content.decode()
        assert f'id="{anchor}"' in html
        assert 'id="pause-all-reason" maxlength="500" value="loops on deploy"' in html
        row = row_of(html, agent.name)
        assert 'name="reason"' in row and 'value="loops on deploy"' in row
        assert "filled in from your request" in html
    assert paused_names() == []


# --- what reviewers are told --------------------------------------------------------------


@pytest.mark.django_db
def test_reviewers_see_which_agents_are_paused_and_why(reviewer, admin_user, make_agent):
    bot, _ = make_agent("bot1")
    other, _ = make_agent("bot2")
    make_agent("bot3")
    proposal = pending_proposal(bot)
    reason = "3 rejections in a row (pause_after_rejections), the last proposal 9"
    Agent.objects.filter(pk=bot.pk).update(
        paused_at=bot.created_at, paused_by=pausing.POLICY, pause_reason=reason
    )
    pausing.pause(["bot2"], "user:ada", "noisy")
    html = logged_in(reviewer).get(reverse("console:queue"), {"view": "all"}).content.decode()
    banner = html[html.index('id="paused-agents"') :].split("</p>")[0]
    assert f"<strong>bot1</strong> ({reason})" in banner
    assert "<strong>bot2</strong> (by user:ada: noisy)" in banner and "bot3" not in banner
    assert "their new proposals are refused" in banner
    assert "an admin resumes them on the agents page" in banner
    assert reverse("console:agents") not in banner  # a reviewer cannot open it
    row = html[html.index(f'id="proposal-row-{proposal.pk}"') :].split("</tr>")[0]
    assert "status-paused" in row
    detail = logged_in(reviewer).get(reverse("console:proposal", args=[proposal.pk]))
    assert 'id="agent-paused"' in detail.content.decode()
    admin_html = logged_in(admin_user).get(reverse("console:queue")).content.decode()
    assert f'<a href="{reverse("console:agents")}">agents page</a>' in admin_html


@pytest.mark.django_db
def test_no_banner_while_no_agent_is_paused_and_one_query_for_it(reviewer, make_agent):
    make_agent("bot")
    client = logged_in(reviewer)
    html = client.get(reverse("console:queue")).content.decode()
    assert 'id="paused-agents"' not in html
    pausing.pause(["bot"], "user:ada", "noisy")
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("console:queue")).content.decode()
    assert 'id="paused-agents"' in html and "its new proposals are refused" in html
    banner = [q["sql"] for q in queries if "paused_at" in q["sql"] and "IS NOT NULL" in q["sql"]]
    assert len(banner) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("in_memory_channel_layer", "consumer_connections_closed")
async def test_the_live_queue_marks_a_paused_agents_proposals(reviewer, agent):
    proposal = await database_sync_to_async(pending_proposal)(agent)
    communicator = await connect(reviewer, "view=all")
    await communicator.connect()
    snapshot = await communicator.receive_from(timeout=5)
    assert f'id="proposal-row-{proposal.pk}"' in snapshot and "status-paused" not in snapshot
    await database_sync_to_async(pausing.pause)([agent.name], "user:ada", "noisy")
    html = await receive_until(communicator, "status-paused")
    assert '<div id="queue-list" hx-swap-oob="true">' in html
    await database_sync_to_async(pausing.resume)([agent.name], "user:ada", "fine")
    html = await receive_until(communicator, "queue-list")
    assert "status-paused" not in html
    await communicator.disconnect()


# --- withdrawn proposals ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_withdrawn_proposal_says_so_and_cannot_be_decided(reviewer_client, agent):
    proposal = pending_proposal(agent)
    withdrawal.withdraw(agent, proposal.pk, "the disk freed itself")
    url = reverse("console:proposal", args=[proposal.pk])
    html = reviewer_client.get(url).content.decode()
    assert 'class="status status-withdrawn" id="proposal-status">Withdrawn by the agent<' in html
    assert '<span id="withdraw-reason">the disk freed itself</span>' in html
    assert 'id="approve-button"' not in html and 'id="reject-button"' not in html
    assert reverse("console:decide", args=[proposal.pk, "approve"]) not in html
    decided = reviewer_client.post(reverse("console:decide", args=[proposal.pk, "approve"]))
    assert decided.status_code == 409
    confirm = reviewer_client.get(reverse("console:decide", args=[proposal.pk, "approve"]))
    assert 'id="approve-button"' not in confirm.content.decode()


@pytest.mark.django_db
def test_withdrawn_proposals_are_listed_and_counted(reviewer_client, agent):
    kept = pending_proposal(agent)
    gone = pending_proposal(agent)
    withdrawal.withdraw(agent, gone.pk, "")
    history = reviewer_client.get(reverse("console:history"), {"status": "withdrawn"})
    html = history.content.decode()
    assert f'id="history-row-{gone.pk}"' in html and f'id="history-row-{kept.pk}"' not in html
    assert '<span class="status status-withdrawn" title="withdrawn by the agent">' in html
    assert '<option value="withdrawn"' in html
    overview = reviewer_client.get(reverse("console:overview")).content.decode()
    assert "withdrawn by the agent" in overview and "share-withdrawn" in overview
    assert "o-withdrawn" in overview
    page = reviewer_client.get(reverse("console:proposal", args=[gone.pk])).content.decode()
    assert "without saying why" in page


# --- the policy's limits and secret patterns in the editor -------------------------------


def editor_post_with_text(client, **changes) -> dict:
    """``editor_post`` with the textareas too, as a browser sends them."""
    html = client.get(reverse("console:policy")).content.decode()
    data = editor_post(client)
    for name, text in re.findall(r'<textarea name="([^"]+)"[^>]*>\n?(.*?)</textarea>', html, re.S):
        data[name] = unescape(text)
    data.update(changes)
    return data


API_SET = {
    **DEFAULT_POLICY,
    "max_pending": 40,
    "pause_after_rejections": 0,
    "secret_patterns": ["acme_[0-9a-f]{32}", r"token=(\w+)"],
    "agent_overrides": {"bot": {"max_pending": 7}},
}


def test_the_override_form_holds_every_overridable_key():
    assert set(OVERRIDABLE) <= set(OverrideForm.base_fields)


@pytest.mark.django_db
def test_saving_the_editor_unchanged_keeps_what_was_set_over_the_api(admin_client_, admin_user):
    current_policy()
    update_policy(API_SET, admin_user, "over the API")
    html = admin_client_.get(reverse("console:policy")).content.decode()
    assert 'name="overrides-0-max_pending"' in html and 'name="max_proposals_per_minute"' in html
    assert "acme_[0-9a-f]{32}\ntoken=(\\w+)</textarea>" in html
    response = admin_client_.post(
        reverse("console:policy"), editor_post_with_text(admin_client_, comment="same"), follow=True
    )
    assert "Policy version 3 is now in force." in response.content.decode()
    policy = current_policy()
    assert policy.agent_overrides == {"bot": {"max_pending": 7}}
    assert policy.secret_patterns == ("acme_[0-9a-f]{32}", r"token=(\w+)")
    assert (policy.max_pending, policy.max_proposals_per_minute) == (40, 600)
    assert policy.pause_after_rejections == 0


@pytest.mark.django_db
def test_the_editor_sets_the_limits_and_the_patterns(admin_client_):
    current_policy()
    lines = "acme_[0-9a-f]{32}\r\n\r\n  spaced (\\d+)\r\n"  # one regex a line, blanks skipped
    data = editor_post_with_text(
        admin_client_,
        max_proposals_per_minute="30",
        secret_patterns=lines,
        **{
            "overrides-0-agent": "bot",
            "overrides-0-pause_after_rejections": "2",
            "overrides-0-max_proposals_per_minute": "5",
        },
    )
    response = admin_client_.post(reverse("console:policy"), data, follow=True)
    assert "Policy version 2 is now in force." in response.content.decode()
    policy = current_policy()
    assert policy.max_proposals_per_minute == 30
    assert policy.secret_patterns == ("acme_[0-9a-f]{32}", r"spaced (\d+)")
    assert policy.agent_overrides == {
        "bot": {"pause_after_rejections": 2, "max_proposals_per_minute": 5}
    }
    assert policy.for_agent("bot").pause_after_rejections == 2


@pytest.mark.django_db
def test_a_pattern_that_is_no_regular_expression_is_refused_in_the_form(admin_client_):
    current_policy()
    data = editor_post_with_text(admin_client_, secret_patterns="acme_\\w+\n([unclosed")
    response = admin_client_.post(reverse("console:policy"), data)
    assert response.status_code == 400
    html = response.content.decode()
    section = html[html.index('id="secret-patterns"') :].split("</section>")[0]
    assert "has-error" in section
    assert '<span class="error">line 2: not a regular expression: ' in section
    assert "([unclosed</textarea>" in section  # kept, to correct
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_limits_out_of_bounds_are_refused(admin_client_):
    current_policy()
    data = editor_post_with_text(
        admin_client_,
        max_pending="0",
        **{"overrides-0-agent": "bot", "overrides-0-max_pending": "0"},
    )
    response = admin_client_.post(reverse("console:policy"), data)
    assert response.status_code == 400
    html = response.content.decode()
    assert "max_pending: Ensure this value is greater than or equal to 1." in html
    assert "overrides[1].max_pending: Ensure this value is greater than or equal to 1." in html
    assert PolicyVersion.objects.count() == 1
