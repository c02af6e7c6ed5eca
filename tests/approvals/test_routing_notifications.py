"""A routed proposal's notices reach its teams: their channels, their people, their addresses.

Against the suite's stand-ins: Slack's Web API (``slack``), a real SMTP server
(``smtp``) and a local webhook endpoint. Review requests of a routed proposal
are posted in its teams' Slack channels (the Slack routes' channel only when
none of them has one) and mailed to those its route lets decide and to each
team's address; an escalation goes to the teams it escalates to; a break-glass
decision is mailed to every admin and every member of the route's teams.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import ThreadingHTTPServer

import pytest
from django.utils import timezone

from accounts.roles import set_provider_groups
from approvals.core import escalation, services
from approvals.models import Proposal
from approvals.notify.models import ReviewerPreferences, Webhook
from tests.approvals.slack_support import click, link, posted, send
from tests.approvals.test_cascade import Recorder, propose
from tests.approvals.test_routing import call, fresh
from tests.conftest import _user, use_policy
from tests.standins import action_ids, mail_text

pytestmark = pytest.mark.django_db

TEAMS = {
    "dba": {"members": ["alice", "bob"], "slack_channel": "#dba", "email": "dba@example.test"},
    "sre": {
        "sso_groups": ["sre-oncall"],
        "slack_channel": "#sre-oncall",
        "email": "sre@example.test",
    },
    "finance": {"members": ["fiona"]},  # no channel, no address of its own
}
REVIEWS = [
    {"match": ["tool:db.*"], "require": {"dba": 1, "sre": 1}},
    {
        "match": ["tool:billing.refund"],
        "require": {"finance": 1},
        "escalate_after_minutes": 15,
        "escalate_to": ["sre"],
    },
]
# Every proposal matches: without teams, this is where a review request goes.
SLACK_ROUTES = [{"channel": "#approvals", "bands": [], "agent": "*", "action": "*"}]
LATER = timedelta(minutes=16)  # past the refund route's escalate_after_minutes


@pytest.fixture
def cast(db):
    """alice and bob (dba), sam (sre, through the provider's group), fiona (finance), rita (a
    reviewer in no team), ada and adam (admins in no team); each with a mail address and a
    linked Slack account that wants direct messages."""
    people = {name: _user(name, reviewer=True) for name in ("alice", "bob", "sam", "fiona", "rita")}
    people |= {name: _user(name, superuser=True) for name in ("ada", "adam")}
    set_provider_groups(people["sam"], ["sre-oncall"], actor="test")
    for number, (name, user) in enumerate(people.items(), start=1):
        user.email = f"{name}@example.test"
        user.save()
        link(user, f"U{number:03d}")
    ReviewerPreferences.objects.update(slack=True)
    use_policy(teams=TEAMS, reviews=REVIEWS, slack_routes=SLACK_ROUTES)
    return people


@pytest.fixture
def hooks(db):
    """A subscribed webhook pointed at a local endpoint that records each request."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.requests, server.script, server.default = [], [], (200, "{}", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Webhook.objects.create(
        name="ops", url=f"http://127.0.0.1:{server.server_address[1]}/hook", secret="k"
    )
    yield server.requests
    server.shutdown()
    server.server_close()


def submitted(agent_api, eager_tasks, tool: str) -> int:
    with eager_tasks(execute=True):
        return propose(agent_api, call(tool))["id"]


def escalated(eager_tasks) -> None:
    with eager_tasks(execute=True):
        assert escalation.escalate_due(timezone.now() + LATER) == 1


def channels(slack, proposal_id: int) -> list[str]:
    """Where Slack was asked to post about the proposal: channels, and people as @username."""
    people = dict(ReviewerPreferences.objects.values_list("slack_user_id", "user__username"))
    return [
        "@" + people[message["channel"]] if message["channel"] in people else message["channel"]
        for message in posted(slack)
        if f"#{proposal_id} " in message["text"]
    ]


def mailed(smtp, kind: str) -> list[str]:
    """The addresses the SMTP server got a mail of this kind for, sorted."""
    return sorted(message["To"] for message in smtp.messages if kind in message["Subject"])


def payloads(requests: list[dict], kind: str) -> list[dict]:
    return [
        body["proposal"]
        for body in (json.loads(request["body"]) for request in requests)
        if body["event"] == kind
    ]


def test_a_routed_review_request_is_posted_in_its_teams_channels_not_the_routes(
    cast, agent_api, slack, eager_tasks
):
    routed = submitted(agent_api, eager_tasks, "db.drop_index")
    # Direct messages to those who may decide: not fiona, rita or the admins.
    assert channels(slack, routed) == ["#dba", "#sre-oncall", "@alice", "@bob", "@sam"]
    for message in posted(slack):
        assert action_ids(message) == ["airlock_approve", "airlock_reject"]

    free = submitted(agent_api, eager_tasks, "crm.lookup")  # no route: as before
    assert channels(slack, free) == [
        "#approvals",
        *("@ada", "@adam", "@alice", "@bob", "@fiona", "@rita", "@sam"),
    ]


def test_without_a_team_channel_the_request_falls_back_to_the_slack_routes_channel(
    cast, agent_api, slack, eager_tasks
):
    refund = submitted(agent_api, eager_tasks, "billing.refund")
    assert channels(slack, refund) == ["#approvals", "@fiona"]


def test_a_review_request_is_mailed_to_the_team_members_who_may_decide_and_its_addresses(
    cast, agent_api, smtp, eager_tasks
):
    submitted(agent_api, eager_tasks, "db.drop_index")
    assert mailed(smtp, "waits for review") == [
        "alice@example.test",
        "bob@example.test",
        "dba@example.test",
        "sam@example.test",
        "sre@example.test",
    ]  # not rita, a reviewer outside the teams; not fiona; not the admins
    [to_alice] = smtp.to("alice@example.test")
    assert "/review/" in mail_text(to_alice)  # a one-tap link of her own
    [to_dba] = smtp.to("dba@example.test")
    assert "/review/" not in mail_text(to_dba)  # an address is nobody: no link


def test_a_team_member_who_may_no_longer_decide_hears_no_more(cast, agent_api, smtp, eager_tasks):
    proposal = submitted(agent_api, eager_tasks, "db.drop_index")
    with eager_tasks(execute=True):
        services.decide(proposal, cast["alice"], "approve", "", authentication=fresh())
        almost = Proposal.objects.get(pk=proposal).expires_at - timedelta(seconds=30)
        assert services.warn_expiring(now=almost) == 1
    # dba's approval is given: of the people, only sre's still decide it. Each team's address
    # hears of every review notice of its route.
    assert mailed(smtp, "expires soon") == [
        "dba@example.test",
        "sam@example.test",
        "sre@example.test",
    ]


def test_an_escalation_goes_to_the_escalate_to_teams_channel_and_members(
    cast, agent_api, slack, smtp, eager_tasks
):
    refund = submitted(agent_api, eager_tasks, "billing.refund")
    slack.calls.clear()
    escalated(eager_tasks)

    # sre's channel and sam; not fiona again, whose team was asked and stayed silent
    assert channels(slack, refund) == ["#sre-oncall", "@sam"]
    for message in posted(slack):
        assert action_ids(message) == ["airlock_approve", "airlock_reject"]  # sre may decide
    assert mailed(smtp, "was escalated") == ["sam@example.test", "sre@example.test"]
    [to_sam] = smtp.to("sam@example.test")
    assert "/review/" in mail_text(to_sam)

    with eager_tasks(execute=True):  # sam approves from the escalated post, in fiona's place
        assert send(click(slack, "airlock_approve", refund, user="U003")).status_code == 200
    assert Proposal.objects.get(pk=refund).status == "approved"


def test_a_break_glass_is_mailed_to_every_admin_and_every_member_of_the_routes_teams(
    cast, agent_api, smtp, eager_tasks
):
    proposal = submitted(agent_api, eager_tasks, "db.drop_index")
    with eager_tasks(execute=True):
        services.decide(
            proposal, cast["ada"], "approve", "outage", authentication=fresh(), break_glass=True
        )
    assert mailed(smtp, "breaking the glass") == [
        "ada@example.test",
        "adam@example.test",
        "alice@example.test",
        "bob@example.test",
        "dba@example.test",
        "sam@example.test",
        "sre@example.test",
    ]  # not rita nor fiona, outside the route's teams


def test_a_webhook_payload_names_the_teams_it_is_for(cast, agent_api, hooks, eager_tasks):
    submitted(agent_api, eager_tasks, "db.drop_index")
    submitted(agent_api, eager_tasks, "billing.refund")
    submitted(agent_api, eager_tasks, "crm.lookup")
    escalated(eager_tasks)
    assert [p["teams"] for p in payloads(hooks, "review_requested")] == [
        ["dba", "sre"],
        ["finance"],
        [],
    ]
    assert [p["teams"] for p in payloads(hooks, "escalated")] == [["sre"]]
