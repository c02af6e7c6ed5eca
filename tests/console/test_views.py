"""The review pages: queue, proposal detail and decisions, execution view, history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import REVIEWERS_GROUP
from approvals.choices import ProposalStatus
from approvals.core.tokens import create_agent
from approvals.models import Agent, Proposal
from approvals.policy.rules import current_policy
from executions.choices import ExecutionStatus
from executions.models import Execution, OutputChunk
from tests.conftest import client_for

from .conftest import logged_in, pending_proposal


def row_ids(html: str) -> list[int]:
    import re

    return [int(n) for n in re.findall(r'id="proposal-row-(\d+)"', html)]


# --- queue ----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_queue_lists_pending_proposals_by_risk_then_age(reviewer_client, agent):
    old_medium = pending_proposal(agent, risk=5, age_minutes=30)
    new_medium = pending_proposal(agent, risk=5, age_minutes=1)
    high = pending_proposal(agent, risk=9, required=2, age_minutes=2)
    pending_proposal(agent, risk=8, status=ProposalStatus.REJECTED)
    html = reviewer_client.get(reverse("console:queue")).content.decode()
    assert row_ids(html) == [high.pk, old_medium.pk, new_medium.pk]


@pytest.mark.django_db
def test_a_queue_row_shows_agent_action_summary_score_age_expiry_and_approvals_left(
    reviewer_client, agent
):
    proposal = pending_proposal(agent, risk=8, required=2, summary="python: import shutil")
    html = reviewer_client.get(reverse("console:queue")).content.decode()
    row = html[html.index(f'id="proposal-row-{proposal.pk}"') :].split("</tr>")[0]
    for text in ("requester", "script.execute", "python: import shutil", ">8<", "2 of 2"):
        assert text in row
    assert "data-countdown" in row and proposal.expires_at.isoformat() in row


@pytest.mark.django_db
def test_the_queue_filters_by_agent_action_risk_band_and_search(reviewer_client, agent):
    other, _ = create_agent("other-bot", ["*"])
    low = pending_proposal(agent, risk=2, summary="python: print")
    high = pending_proposal(agent, risk=9, summary="python: import shutil")
    theirs = pending_proposal(other, risk=5, action="host.exec", summary="uptime")
    url = reverse("console:queue")
    assert row_ids(reviewer_client.get(url, {"agent": "other-bot"}).content.decode()) == [theirs.pk]
    assert row_ids(reviewer_client.get(url, {"action": "host.exec"}).content.decode()) == [
        theirs.pk
    ]
    assert row_ids(reviewer_client.get(url, {"risk": "high"}).content.decode()) == [high.pk]
    assert row_ids(reviewer_client.get(url, {"risk": "low"}).content.decode()) == [low.pk]
    assert row_ids(reviewer_client.get(url, {"q": "shutil"}).content.decode()) == [high.pk]
    assert row_ids(reviewer_client.get(url, {"q": f"#{low.pk}"}).content.decode()) == [low.pk]
    assert "No pending proposal matches" in reviewer_client.get(url, {"q": "zzz"}).content.decode()


@pytest.mark.django_db
def test_an_htmx_filter_request_gets_only_the_queue_partial(reviewer_client, agent):
    pending_proposal(agent)
    response = reviewer_client.get(
        reverse("console:queue"), {"risk": "medium"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="queue"
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="queue"')
    assert "<html" not in html
    assert 'ws-connect="/ws/queue/?risk=medium"' in html


@pytest.mark.django_db
def test_the_shell_shows_the_sandbox_and_the_pending_count(reviewer_client, agent):
    pending_proposal(agent)
    pending_proposal(agent)
    html = reviewer_client.get(reverse("console:queue")).content.decode()
    assert 'id="pending-count"' in html and ">2</span>" in html
    assert 'id="sandbox-badge"' in html and "sandbox: " in html
    assert "htmx-2.0.11/htmx.min.js" in html and "htmx-ext-ws-2.0.4/ws.min.js" in html


def test_the_vendored_scripts_are_served_without_internet(client, db):
    for path in ("vendor/htmx-2.0.11/htmx.min.js", "vendor/htmx-ext-ws-2.0.4/ws.min.js"):
        from django.contrib.staticfiles import finders

        assert finders.find(path), path


# --- proposal detail ----------------------------------------------------------------


@pytest.mark.django_db
def test_the_detail_shows_code_risk_decision_path_requester_and_countdown(reviewer_client, agent):
    proposal = pending_proposal(
        agent,
        risk=8,
        required=2,
        decision_path={
            "step": "review",
            "rule": "action:script.*",
            "reason": "risk 8 is at or above the high-risk threshold 7: 2 reviewers must approve",
            "policy_version": 3,
            "notify": False,
        },
        policy_version=3,
    )
    html = reviewer_client.get(reverse("console:proposal", args=[proposal.pk])).content.decode()
    assert '<span class="kn">import</span>' in html  # Pygments-highlighted Python
    assert "imports os (processes, files and environment)" in html
    assert "version 3" in html and "action:script.*" in html and "high-risk threshold" in html
    assert "requester" in html and "look around" in html
    assert 'id="approvals-remaining">2<' in html
    assert "data-countdown" in html


@pytest.mark.django_db
def test_an_htmx_approval_swaps_the_panel_and_shows_the_execution(reviewer_client, agent):
    proposal = pending_proposal(agent)
    response = reviewer_client.post(
        reverse("console:decide", args=[proposal.pk, "approve"]),
        {"comment": "fine"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<aside id="proposal-panel"')
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.APPROVED
    assert f"/executions/{proposal.execution_id}/" in html
    assert "fine" in html


@pytest.mark.django_db
def test_the_plain_form_without_javascript_redirects_back_with_a_message(reviewer_client, agent):
    proposal = pending_proposal(agent)
    url = reverse("console:decide", args=[proposal.pk, "reject"])
    response = reviewer_client.post(url, {"comment": "too broad"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("console:proposal", args=[proposal.pk])
    assert f"You rejected proposal {proposal.pk}." in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.REJECTED


@pytest.mark.django_db
def test_the_confirm_dialog_returns_to_the_queue_but_never_off_site(reviewer_client, agent):
    first, second = pending_proposal(agent), pending_proposal(agent)
    response = reviewer_client.post(
        reverse("console:decide", args=[first.pk, "approve"]), {"next": "/?risk=medium"}
    )
    assert response["Location"] == "/?risk=medium"
    response = reviewer_client.post(
        reverse("console:decide", args=[second.pk, "approve"]), {"next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("console:proposal", args=[second.pk])


@pytest.mark.django_db
def test_a_second_decision_says_already_decided(reviewer_client, agent, reviewer2):
    proposal = pending_proposal(agent)
    logged_in(reviewer2).post(reverse("console:decide", args=[proposal.pk, "reject"]))
    for headers in ({"HTTP_HX_REQUEST": "true"}, {}):
        response = reviewer_client.post(
            reverse("console:decide", args=[proposal.pk, "approve"]), **headers
        )
        assert response.status_code == 409
        html = response.content.decode()
        assert 'id="decision-error"' in html and "not pending" in html


@pytest.mark.django_db
def test_a_reviewer_cannot_approve_twice_at_a_quorum(reviewer_client, agent):
    proposal = pending_proposal(agent, risk=9, required=2)
    url = reverse("console:decide", args=[proposal.pk, "approve"])
    first = reviewer_client.post(url, HTTP_HX_REQUEST="true")
    assert "You have decided" in first.content.decode()
    second = reviewer_client.post(url, HTTP_HX_REQUEST="true")
    assert second.status_code == 409
    assert "has already decided" in second.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.PENDING and proposal.approvals_count == 1


@pytest.mark.django_db
def test_the_owner_of_an_agent_is_told_it_cannot_approve(make_agent, reviewer):
    owned, _ = make_agent("owned-bot", ["*"], owner=reviewer)
    proposal = pending_proposal(owned)
    response = logged_in(reviewer).post(
        reverse("console:decide", args=[proposal.pk, "approve"]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 403
    assert "owns agent owned-bot and cannot decide" in response.content.decode()


@pytest.mark.django_db
def test_an_expired_proposal_cannot_be_approved(reviewer_client, agent):
    proposal = pending_proposal(agent, expires_at=timezone.now() - timedelta(seconds=1))
    response = reviewer_client.post(
        reverse("console:decide", args=[proposal.pk, "approve"]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 409
    assert "expired" in response.content.decode()


@pytest.mark.django_db
def test_a_rejection_comment_reaches_the_agent_over_the_api(reviewer_client, agent_api, agent):
    proposal = pending_proposal(agent)
    reviewer_client.post(
        reverse("console:decide", args=[proposal.pk, "reject"]), {"comment": "not on prod"}
    )
    body = agent_api.get(f"/api/v1/proposals/{proposal.pk}").json()
    assert body["status"] == "rejected"
    assert body["decisions"][0]["comment"] == "not on prod"


# --- execution view --------------------------------------------------------------------


@pytest.mark.django_db
def test_the_execution_page_shows_status_provenance_and_output_without_js(
    reviewer_client, execution
):
    OutputChunk.objects.create(
        execution=execution, seq=1, stream="stdout", data="\x1b[32mok\x1b[0m\n"
    )
    Execution.objects.filter(pk=execution.pk).update(
        status=ExecutionStatus.SUCCEEDED,
        exit_code=0,
        started_at=timezone.now() - timedelta(seconds=2),
        finished_at=timezone.now(),
        worker_host="worker-7",
        backend="local",
    )
    html = reviewer_client.get(reverse("console:execution", args=[execution.pk])).content.decode()
    assert 'data-ws="/ws/executions/' in html
    assert '<noscript><pre class="terminal">ok\n</pre></noscript>' in html
    assert 'id="exit-code">0<' in html and "2.0 s" in html
    assert "worker-7" in html and execution.command_hash in html
    assert 'id="cancel-button"' not in html


@pytest.mark.django_db
def test_a_reviewer_cancels_a_queued_execution(reviewer_client, execution):
    page = reviewer_client.get(reverse("console:execution", args=[execution.pk])).content.decode()
    assert 'id="cancel-button"' in page
    response = reviewer_client.post(
        reverse("console:cancel", args=[execution.pk]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert "status-cancelled" in response.content.decode()
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.CANCELLED
    assert execution.cancel_requested_by == "user:rita"


@pytest.mark.django_db
def test_cancelling_a_finished_execution_explains_why_not(reviewer_client, execution):
    Execution.objects.filter(pk=execution.pk).update(status=ExecutionStatus.SUCCEEDED)
    response = reviewer_client.post(
        reverse("console:cancel", args=[execution.pk]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 409
    assert "already succeeded" in response.content.decode()


# --- history ------------------------------------------------------------------------


def make_history(agent_count: int = 3, per_agent: int = 3334) -> list[Agent]:
    agents = [create_agent(f"bulk-{i}", ["*"])[0] for i in range(agent_count)]
    now = timezone.now()
    statuses = [ProposalStatus.APPROVED, ProposalStatus.REJECTED, ProposalStatus.DENIED]
    Proposal.objects.bulk_create(
        Proposal(
            agent=agents[i % agent_count],
            action="script.execute" if i % 2 else "host.exec",
            parameters={},
            summary=f"item {i}",
            status=statuses[i % 3],
            risk_score=i % 11,
            created_at=now - timedelta(minutes=i),
        )
        for i in range(agent_count * per_agent)
    )
    return agents


@pytest.fixture
def history_rows(db):
    return make_history()


@pytest.fixture
def some_history(db):
    return make_history(per_agent=40)


@pytest.mark.django_db
def test_history_pages_take_a_constant_number_of_queries_with_10000_proposals(
    reviewer_client, history_rows, django_assert_num_queries
):
    assert Proposal.objects.count() >= 10_000
    current_policy()  # made on first use: not this page's cost
    url = reverse("console:history")
    # session, user, the policy (is a second factor required?), reviewers group,
    # pending count, what waits for the reviewer (pending rows, their decisions),
    # agent list, count, page
    for params in (
        {},
        {"page": 2},
        {"page": 150},
        {"agent": "bulk-1", "page": 3},
        {"action": "host.exec", "status": "rejected"},
        {"status": "approved", "risk": "ignored"},
        {"since": "2020-01-01", "until": "2100-01-01", "q": "item 9"},
    ):
        with django_assert_num_queries(10):
            response = reviewer_client.get(url, params)
        assert response.status_code == 200


@pytest.mark.django_db
def test_history_filters_and_paginates(reviewer_client, agent):
    now = timezone.now()
    old = pending_proposal(agent, status=ProposalStatus.DENIED, created_at=now - timedelta(days=5))
    recent = pending_proposal(agent, status=ProposalStatus.APPROVED)
    execution = Execution.objects.create(
        action="script.execute", command_hash="1" * 64, status=ExecutionStatus.SUCCEEDED
    )
    Proposal.objects.filter(pk=recent.pk).update(execution=execution)
    url = reverse("console:history")

    def ids(params):
        import re

        html = reviewer_client.get(url, params).content.decode()
        return [int(n) for n in re.findall(r'id="history-row-(\d+)"', html)]

    assert ids({}) == [recent.pk, old.pk]
    assert ids({"status": "denied"}) == [old.pk]
    assert ids({"status": "run:succeeded"}) == [recent.pk]
    day = (now - timedelta(days=5)).date().isoformat()
    assert ids({"since": day, "until": day}) == [old.pk]
    assert ids({"status": "not-a-status"}) == [recent.pk, old.pk]  # ignored, not an error


@pytest.mark.django_db
def test_history_is_paginated(reviewer_client, some_history):
    html = reviewer_client.get(reverse("console:history"), {"page": 2}).content.decode()
    assert "page 2 of 3" in html
    assert html.count('id="history-row-') == 50


@pytest.mark.django_db
def test_a_long_history_is_counted_only_as_far_as_it_is_paged(
    reviewer_client, some_history, monkeypatch
):
    from approvals.review.paging import CappedPaginator

    total = Proposal.objects.count()
    monkeypatch.setattr(CappedPaginator, "CAP", 60)
    url = reverse("console:history")
    html = reviewer_client.get(url, {"page": 2}).content.decode()
    assert "More than 60 proposals: the newest 60 are paged here" in html
    assert "page 2 of 2+" in html and html.count('id="history-row-') == 10
    html = reviewer_client.get(url, {"page": 9}).content.decode()  # past the cap: the last page
    assert "page 2 of 2+" in html
    monkeypatch.setattr(CappedPaginator, "CAP", total)
    html = reviewer_client.get(url).content.decode()
    assert f"{total} proposals" in html and "More than" not in html


@pytest.mark.django_db
def test_the_history_page_query_uses_an_index(some_history):
    if connection.vendor != "sqlite":
        pytest.skip("the plan text is SQLite's")
    from approvals.review.views.proposals import history_page

    _, page = history_page({"agent": "bulk-1"})
    plan = page.object_list.explain()
    assert "USING INDEX proposal_agent_recent" in plan, plan
    _, page = history_page({})
    plan = page.object_list.explain()
    # Walked in created_at order by an index that leads with it (which one is SQLite's
    # choice from the statistics), never sorted whole.
    assert "proposal_recent" in plan or "proposal_outcomes" in plan, plan
    assert "TEMP B-TREE FOR ORDER BY" not in plan, plan


@pytest.mark.django_db
def test_a_reviewer_added_to_the_group_gets_in(outsider):
    outsider.groups.add(Group.objects.get_or_create(name=REVIEWERS_GROUP)[0])
    assert logged_in(outsider).get(reverse("console:queue")).status_code == 200


@pytest.mark.django_db
def test_the_api_stays_json_for_a_browser_session(reviewer_client):
    client = client_for(None)
    assert client.get("/api/v1/nowhere").json()["error"]["type"] == "not_found"


@pytest.mark.django_db
def test_the_shell_warns_when_the_sandbox_is_weak(reviewer_client, monkeypatch):
    from executions.sandboxes import status

    weak = {
        "backend": "local",
        "isolation": "weak",
        "ok": True,
        "reason": "no bubblewrap",
        "warning": status.WEAK_WARNING,
    }
    monkeypatch.setattr(status, "sandbox_status", lambda refresh=False: weak)
    html = reviewer_client.get(reverse("console:queue")).content.decode()
    assert 'class="warning warning-danger" id="sandbox-warning"' in html
    assert "weak isolation" in html and "policy alone approves none" in html
    assert 'class="sandbox sandbox-weak"' in html and "sandbox: local · weak" in html


@pytest.mark.django_db
def test_logging_in_lands_a_reviewer_on_the_queue(client, reviewer, agent):
    waiting = pending_proposal(agent)
    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"login": "rita", "password": "pw-rita"})
    assert response.status_code == 302 and response["Location"] == reverse("console:home") == "/"
    landing = client.get("/")
    assert landing.status_code == 200 and f'id="proposal-row-{waiting.pk}"' in landing.text
    assert client.get(reverse("console:queue")).status_code == 200
    bad = Client().post(reverse("login"), {"login": "rita", "password": "wrong"})
    assert bad.status_code == 200 and 'role="alert"' in bad.content.decode()
