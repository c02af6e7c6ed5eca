"""The agent's history on a proposal's page (approvals.review.history): its last proposals
of the action and of the target, who decided them and how their runs ended, how the action
on the target fared for every agent, the pointer to the policy suggestions; bounded queries.

Everything is made through the services an agent and reviewers use: ``submit``,
``decide``, and an agent's ``report`` of the tool calls it carried out.
"""

from __future__ import annotations

import re
import secrets
import string
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from approvals.core.services import decide, submit
from approvals.models import Proposal
from approvals.review.history import FARED_DAYS, decided_by, history_of
from audit.services import actor_label
from executions import services as executions
from tests.conftest import use_policy

from .conftest import logged_in

MERGE, CLOSE = "github.merge_pull_request", "github.close_issue"


def call(agent, tool: str = MERGE, **arguments):
    body = {"tool": tool, "arguments": arguments or {"repo": "acme/web"}}
    return submit(agent, {"action": "tool.call", "parameters": body, "reason": "r"}).proposal


def approved(proposal, *reviewers):
    for reviewer in reviewers:
        decide(proposal.pk, reviewer, "approve")
    return Proposal.objects.select_related("execution").get(pk=proposal.pk)


def reported(proposal, succeeded: bool) -> None:
    executions.report(
        proposal.execution_id, actor_label(proposal.agent), succeeded, "done" if succeeded else "no"
    )


def rows(html: str, list_id: str) -> list[int]:
    return [int(n) for n in re.findall(rf'<tr id="{list_id}-(\d+)">', html)]


def row(html: str, list_id: str, pk: int) -> str:
    return re.search(rf'<tr id="{list_id}-{pk}">(.*?)</tr>', html, re.S).group(1)


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip()


@pytest.fixture
def story(agent, make_agent, reviewer, reviewer2):
    """The requester's tool calls, decided and run in every way, and another agent's."""
    other, _ = make_agent("other")
    merged = approved(call(agent), reviewer)
    reported(merged, succeeded=True)
    refused = call(agent)
    decide(refused.pk, reviewer2, "reject", "not today")
    closed = approved(call(agent, CLOSE), reviewer)
    reported(closed, succeeded=False)
    waiting = call(agent)
    theirs = approved(call(other), reviewer2)
    reported(theirs, succeeded=False)
    use_policy(allow=[{"kind": "tool", "pattern": MERGE, "note": "merges are fine"}])
    by_policy = Proposal.objects.get(pk=call(agent).pk)
    reported(by_policy, succeeded=True)
    return {
        "merged": merged,
        "refused": refused,
        "closed": closed,
        "waiting": waiting,
        "theirs": theirs,
        "by_policy": by_policy,
    }


def page(client, proposal) -> str:
    response = client.get(reverse("console:proposal", args=[proposal.pk]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_the_page_lists_the_agents_last_proposals_of_the_action_and_of_the_target(
    reviewer_client, story
):
    html = page(reviewer_client, story["waiting"])

    s = story
    assert rows(html, "history-same-action") == [
        s["by_policy"].pk,
        s["closed"].pk,
        s["refused"].pk,
        s["merged"].pk,
    ]  # newest first, not the page's own, not the other agent's
    assert rows(html, "history-same-target") == [s["by_policy"].pk, s["refused"].pk, s["merged"].pk]
    assert f"tool {MERGE}" in html
    for pk in rows(html, "history-same-action"):
        assert f'href="{reverse("console:proposal", args=[pk])}"' in html


@pytest.mark.django_db
def test_each_row_says_its_decision_who_decided_when_and_how_its_run_ended(reviewer_client, story):
    html = page(reviewer_client, story["waiting"])

    def cells(name: str) -> str:
        return text(row(html, "history-same-action", story[name].pk))

    assert re.fullmatch(
        rf"#{story['merged'].pk} .* ago approved rita .* ago succeeded exit 0", cells("merged")
    )
    assert re.fullmatch(rf"#{story['refused'].pk} .* ago rejected ravi .* ago —", cells("refused"))
    assert re.fullmatch(
        rf"#{story['closed'].pk} .* ago approved rita .* ago failed exit 1", cells("closed")
    )
    assert re.fullmatch(
        rf"#{story['by_policy'].pk} .* ago approved policy .* ago succeeded exit 0",
        cells("by_policy"),
    )
    execution = story["merged"].execution_id
    assert f'href="{reverse("console:execution", args=[execution])}"' in row(
        html, "history-same-action", story["merged"].pk
    )
    assert 'title="the policy: allow_list"' in row(
        html, "history-same-action", story["by_policy"].pk
    )


@pytest.mark.django_db
def test_how_the_action_on_the_target_fared_for_every_agent(reviewer_client, story):
    html = page(reviewer_client, story["waiting"])

    fared = text(re.search(r'id="history-fared">(.*?)</p>', html, re.S).group(1))
    # merged (rita), theirs (ravi, another agent), by_policy; refused; runs: 2 ok, 1 failed.
    assert fared == (
        "4 proposals: 3 approved (2 by reviewers) 1 rejected · runs: 2 succeeded 1 failed"
    )
    assert f"last {FARED_DAYS} days" in html


@pytest.mark.django_db
def test_the_page_of_a_proposal_without_history_says_so(reviewer_client, agent):
    html = page(reviewer_client, call(agent))
    assert "This agent made no other proposal of this action." in html
    assert "None on this target." in html
    assert "No other proposal of this action on this target." in html
    assert 'id="history-suggestion"' not in html


@pytest.mark.django_db
def test_a_script_has_a_history_of_its_action_but_no_target(reviewer_client, agent, reviewer):
    first = submit(
        agent,
        {"action": "script.execute", "parameters": {"language": "python", "code": "print(1)"}},
    ).proposal
    second = submit(
        agent,
        {"action": "script.execute", "parameters": {"language": "python", "code": "print(2)"}},
    ).proposal
    html = page(reviewer_client, second)
    assert rows(html, "history-same-action") == [first.pk]
    assert 'id="history-same-target"' not in html


def docker_stop(agent, container: str):
    body = {"action": "docker.stop_container", "parameters": {"container": container}}
    return submit(agent, {**body, "reason": "r"}).proposal


def service_restart(agent, service: str, host: str):
    body = {"action": "host.restart_service", "parameters": {"service_name": service, "host": host}}
    return submit(agent, {**body, "reason": "r"}).proposal


@pytest.mark.django_db
def test_the_target_is_the_container_or_the_host_and_service(agent):
    web1, _, web1_again = (docker_stop(agent, n) for n in ("web-1", "web-2", "web-1"))
    found = history_of(web1_again)
    assert [p.pk for p in found.same_target] == [web1.pk]
    assert (found.target, len(found.same_action)) == ("container web-1", 2)

    nginx_a = service_restart(agent, "nginx", "host-a")
    service_restart(agent, "nginx", "host-b")
    service_restart(agent, "redis", "host-a")
    found = history_of(service_restart(agent, "nginx", "host-a"))
    assert [p.pk for p in found.same_target] == [nginx_a.pk]
    assert found.target == "service nginx, host host-a"


@pytest.mark.django_db
def test_only_the_last_ten_are_listed(agent):
    made = [docker_stop(agent, "web-1") for _ in range(13)]
    found = history_of(made[-1])
    assert [p.pk for p in found.same_action] == [p.pk for p in reversed(made[2:12])]
    assert [p.pk for p in found.same_target] == [p.pk for p in reversed(made[2:12])]


@pytest.mark.django_db
def test_the_fared_counts_keep_to_their_window(agent, reviewer):
    old = approved(docker_stop(agent, "web-1"), reviewer)
    Proposal.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(days=FARED_DAYS + 1)
    )
    approved(docker_stop(agent, "web-1"), reviewer)
    found = history_of(docker_stop(agent, "web-1"))
    assert (found.fared.total, found.fared.approved) == (1, 1)
    assert len(found.same_target) == 2  # the agent's own list is not windowed


def test_who_decided_reads_the_decisions_or_the_policy():
    rita, ravi = ("approve", "rita", False), ("approve", "ravi", False)
    assert decided_by("approved", [rita, ravi]) == "rita, ravi"
    assert decided_by("approved", []) == "policy"
    assert decided_by("approved", [("approve", "ada", True)]) == "ada (break glass)"
    assert decided_by("rejected", [rita, ("reject", "ravi", False)]) == "ravi"
    assert decided_by("denied", []) == "policy"
    for status in ("pending", "expired", "withdrawn"):
        assert decided_by(status, [rita]) == ""


# --- the policy suggestions ---------------------------------------------------


@pytest.fixture
def approved_five_times(agent, reviewer):
    for _ in range(5):
        approved(docker_stop(agent, "web-1"), reviewer)
    return docker_stop(agent, "web-1")


@pytest.mark.django_db
def test_reviewers_who_keep_approving_are_pointed_to_the_suggestions(
    approved_five_times, reviewer_client, admin_client_
):
    html = page(admin_client_, approved_five_times)
    suggestions = reverse("console:policy-suggestions")
    assert f'<a href="{suggestions}" id="history-suggestion-link">' in html
    assert "<code>container:web-1</code>" in html
    # The suggestions page, with its own logic, suggests that very rule.
    assert "container:web-1" in admin_client_.get(suggestions).content.decode()

    html = page(reviewer_client, approved_five_times)  # a reviewer cannot open that page
    assert 'id="history-suggestion"' in html and 'id="history-suggestion-link"' not in html


@pytest.mark.django_db
def test_no_pointer_after_a_rejection_or_once_a_list_decides_it(
    approved_five_times, agent, reviewer, reviewer_client
):
    use_policy(notify=[{"kind": "container", "pattern": "web-*", "note": "watched"}])
    assert 'id="history-suggestion"' not in page(reviewer_client, approved_five_times)
    use_policy()
    assert 'id="history-suggestion"' in page(reviewer_client, approved_five_times)
    decide(docker_stop(agent, "web-1").pk, reviewer, "reject")
    assert 'id="history-suggestion"' not in page(reviewer_client, approved_five_times)


@pytest.mark.django_db
def test_fewer_approvals_than_the_suggestions_ask_point_nowhere(agent, reviewer, reviewer_client):
    for _ in range(4):
        approved(docker_stop(agent, "web-1"), reviewer)
    assert 'id="history-suggestion"' not in page(reviewer_client, docker_stop(agent, "web-1"))


# --- masking, access, cost ----------------------------------------------------


@pytest.mark.django_db
def test_a_credential_in_an_earlier_proposal_stays_masked(agent, reviewer_client):
    key = "AKIA" + "".join(
        secrets.choice(string.ascii_uppercase + string.digits) for _ in range(16)
    )
    call(agent, note=f"use {key}")
    html = page(reviewer_client, call(agent))
    assert key not in html and key[4:] not in html


@pytest.mark.django_db
def test_only_reviewers_see_the_history(story, outsider):
    response = logged_in(outsider).get(reverse("console:proposal", args=[story["waiting"].pk]))
    assert response.status_code in (302, 403)
    assert "proposal-history" not in response.content.decode()


def queries_for(client, proposal) -> int:
    with CaptureQueriesContext(connection) as captured:
        page(client, proposal)
    return len(captured)


@pytest.mark.django_db
def test_the_history_costs_the_same_queries_however_many_rows_it_shows(
    agent, make_agent, reviewer, reviewer_client
):
    other, _ = make_agent("other")
    decide(call(agent).pk, reviewer, "reject")  # a rejection: no pointer, either time
    reported(approved(call(agent), reviewer), succeeded=True)
    shown = call(agent)
    html = page(reviewer_client, shown)
    assert len(rows(html, "history-same-action")) == len(rows(html, "history-same-target")) == 2
    few = queries_for(reviewer_client, shown)

    for _ in range(12):
        reported(approved(call(agent), reviewer), succeeded=False)
        reported(approved(call(other), reviewer), succeeded=True)
    html = page(reviewer_client, shown)
    assert len(rows(html, "history-same-action")) == len(rows(html, "history-same-target")) == 10
    assert queries_for(reviewer_client, shown) == few
