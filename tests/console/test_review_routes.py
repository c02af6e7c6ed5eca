"""The console under review routes: "Needs me", the teams on a proposal's page, break-glass."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from approvals.models import Proposal
from audit.models import AuditEvent
from tests.approvals.test_cascade import propose
from tests.approvals.test_routing import call, cast  # noqa: F401 - the cast of people
from tests.console.conftest import logged_in

pytestmark = pytest.mark.django_db


def test_the_queue_opens_on_what_waits_for_me_beside_all_pending(cast, agent_api):  # noqa: F811
    db = propose(agent_api, call("db.drop_index"))["id"]
    refund = propose(agent_api, call("billing.refund", amount=1250))["id"]
    alice = logged_in(cast["alice"]).get(reverse("console:queue")).text
    assert "<title>Needs me (1) · Airlock</title>" in alice
    assert f"proposal-row-{db}" in alice and f"proposal-row-{refund}" not in alice
    assert re.search(
        r'id="tab-mine"[^>]*>Needs me <span class="count" id="mine-count">1</span>', alice
    )
    everything = logged_in(cast["alice"]).get(reverse("console:queue") + "?view=all").text
    assert f"proposal-row-{db}" in everything and f"proposal-row-{refund}" in everything
    rita = logged_in(cast["rita"]).get(reverse("console:queue")).text
    assert "Nothing waits for you." in rita


def test_a_reviewer_outside_the_route_sees_disabled_buttons_and_why(cast, agent_api):  # noqa: F811
    made = propose(agent_api, call("db.drop_index"))["id"]
    page = logged_in(cast["rita"]).get(reverse("console:proposal", args=[made])).text
    assert 'id="required-reviews"' in page
    assert re.search(r'id="team-dba"><strong>dba</strong> 0 of 1 · may decide: alice, bob', page)
    said = "needs 1 approval from dba (alice, bob) and 1 approval from sre (sam)"
    assert f"You cannot decide this proposal: {said}." in page
    assert re.search(r'id="approve-button" disabled', page)
    assert "break-glass-form" not in page  # not an admin
    refused = logged_in(cast["rita"]).post(reverse("console:decide", args=[made, "approve"]), {})
    assert refused.status_code == 403 and said in refused.text
    member = logged_in(cast["alice"]).get(reverse("console:proposal", args=[made])).text
    assert "You cannot decide" not in member and "data-approve" in member


def test_an_admin_breaks_the_glass_in_the_console_and_it_stays_red_until_reviewed(
    cast,  # noqa: F811
    agent_api,
):
    made = propose(agent_api, call("db.drop_index"))["id"]
    admin = cast["ada"]
    page = logged_in(admin).get(reverse("console:proposal", args=[made])).text
    assert 'id="break-glass-form"' in page
    url = reverse("console:decide", args=[made, "approve"])
    stale = logged_in(admin, stepped_up=False).post(url, {"break_glass": "1", "comment": "outage"})
    assert stale.status_code == 302 and "step-up" in stale["Location"]  # a fresh factor, always
    assert Proposal.objects.get(pk=made).status == "pending"
    empty = logged_in(admin).post(url, {"break_glass": "1", "comment": " "})
    assert empty.status_code == 400 and "needs a comment" in empty.text
    done = logged_in(admin).post(url, {"break_glass": "1", "comment": "outage: writes blocked"})
    assert done.status_code == 302
    assert Proposal.objects.get(pk=made).status == "approved"

    overview = logged_in(admin).get(reverse("console:overview")).text
    assert 'id="break-glass-list"' in overview and f"#{made}" in overview
    shown = logged_in(cast["rita"]).get(reverse("console:proposal", args=[made])).text
    assert 'class="break-glass unreviewed"' in shown and "outage: writes blocked" in shown
    mark = reverse("console:break-glass-reviewed", args=[made])
    logged_in(admin).post(mark)  # not by the one who broke it
    assert Proposal.objects.get(pk=made).break_glass_reviewed_at is None
    logged_in(cast["rita"]).post(mark)
    assert Proposal.objects.get(pk=made).break_glass_reviewed_by == cast["rita"]
    assert AuditEvent.objects.filter(verb="proposal.break_glass_reviewed").count() == 1
    assert 'id="break-glass-list"' not in logged_in(admin).get(reverse("console:overview")).text


def test_the_teams_page_says_who_is_in_each_team_why_and_what_waits_for_it(
    cast,  # noqa: F811
    agent_api,
):
    made = propose(agent_api, call("db.drop_index"))["id"]
    page = logged_in(cast["ada"]).get(reverse("console:teams")).text
    assert re.search(r"<td>alice</td><td>the policy&#x27;s members</td><td>yes</td>", page)
    assert re.search(r"<td>sam</td><td>provider group sre-oncall</td><td>yes</td>", page)
    dba = page[page.index('id="team-dba"') : page.index('id="team-sre"')]
    assert f"#{made} " in dba and "reviews[1]: tool:db.*" in dba
    assert "Waiting for finance (0)" in page
    assert logged_in(cast["rita"]).get(reverse("console:teams")).status_code == 403


def test_the_nav_badge_and_the_tabs_title_count_what_waits_for_me(cast, agent_api):  # noqa: F811
    propose(agent_api, call("db.drop_index"))  # dba and sre decide it
    propose(agent_api, call("billing.refund", amount=1250))  # finance
    history = reverse("console:history")
    alice = logged_in(cast["alice"]).get(history).text
    badge = r'<span id="pending-count" class="badge{hot}" title="proposals waiting for your decision" aria-label="{n} waiting for you">{n}</span>'
    assert re.search(badge.format(hot=" badge-hot", n=1), alice)
    rita = logged_in(cast["rita"]).get(history).text
    assert re.search(badge.format(hot="", n=0), rita)  # two pending, none hers
    overview = logged_in(cast["rita"]).get(reverse("console:overview")).text
    assert re.search(r'<span class="figure">2</span> waiting now', overview)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("in_memory_channel_layer", "consumer_connections_closed")
async def test_a_request_for_review_reaches_only_the_consoles_of_those_who_may_decide_it(
    cast,  # noqa: F811
    agent_api,
):
    from channels.db import database_sync_to_async

    from tests.console.test_queue_consumer import connect, receive_until, send_notice

    made = await database_sync_to_async(propose)(agent_api, call("db.drop_index"))
    proposal = await database_sync_to_async(Proposal.objects.select_related("agent").get)(
        pk=made["id"]
    )
    consoles = {}
    for name in ("alice", "rita"):
        consoles[name] = await connect(cast[name], "shell=1")
        await consoles[name].connect()
        snapshot = await consoles[name].receive_from(timeout=5)
        waiting = 1 if name == "alice" else 0
        assert f'aria-label="{waiting} waiting for you"' in snapshot
    await send_notice(proposal, proposal.agent)
    told = await receive_until(consoles["alice"], "notice")
    assert f"#{proposal.pk} script.execute" in told and "waits for review" in told
    assert await consoles["rita"].receive_nothing(timeout=1)
    for console in consoles.values():
        await console.disconnect()
