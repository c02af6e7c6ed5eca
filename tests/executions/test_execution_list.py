"""GET /api/v1/executions: who sees what, the filters, cursors, one query a page, errors."""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Decision
from executions.models import Execution
from tests.approvals.test_proposal_list import error, ids, make
from tests.conftest import client_for

URL = "/api/v1/executions"
T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.UTC)


def ran(agent, status="succeeded", minutes=0, risk=0, action="script.execute", **fields):
    started = T0 + dt.timedelta(minutes=minutes)
    execution = Execution.objects.create(
        action=action,
        status=status,
        command_hash="0" * 64,
        exit_code=0 if status == "succeeded" else 1,
        started_at=started,
        finished_at=started + dt.timedelta(milliseconds=1500),
    )
    Execution.objects.filter(pk=execution.pk).update(created_at=started)  # auto_now_add
    make(
        agent,
        risk=risk,
        status="approved",
        action=action,
        minutes=minutes,
        execution=execution,
        **fields,
    )
    return execution


def test_reviewers_see_every_execution_an_agent_those_of_its_proposals(
    agent, agent_api, make_agent, reviewer_api, outsider_api
):
    other, other_token = make_agent("other-bot", ["*"])
    mine = ran(agent, minutes=1)
    theirs = ran(other, minutes=2)
    assert ids(reviewer_api.get(URL)) == [theirs.pk, mine.pk]
    assert ids(agent_api.get(URL)) == [mine.pk]
    assert ids(client_for(other_token).get(URL, {"agent": "requester"})) == []
    assert "only reviewers and the proposing agent" in error(outsider_api.get(URL), 403)
    assert client_for().get(URL).status_code == 401


def test_an_item_says_how_it_ended_without_its_output(agent, reviewer_api):
    execution = ran(agent, status="failed", risk=4, summary="deploy")
    [item] = reviewer_api.get(URL).json()["items"]
    assert item == {
        "id": execution.pk,
        "proposal_id": execution.proposal.pk,
        "agent": "requester",
        "risk": 4,
        "action": "script.execute",
        "status": "failed",
        "success": False,
        "exit_code": 1,
        "duration_ms": 1500,
        "timed_out": False,
        "truncated": False,
        "backend": "",
        "error": "",
        "last_seq": 0,
        "created_at": "2026-11-01T09:00:00Z",
        "started_at": "2026-11-01T09:00:00Z",
        "finished_at": "2026-11-01T09:00:01.500000Z",
    }


def test_the_filters_narrow_and_combine(agent, make_agent, reviewer, reviewer_api):
    other, _ = make_agent("other-bot", ["*"])
    a = ran(agent, minutes=0, risk=2, summary="print hello")
    b = ran(agent, status="failed", minutes=10, risk=6, action="docker.run_container")
    c = ran(other, status="timed_out", minutes=20, risk=8, action="host.service_restart")
    Decision.objects.create(proposal=c.proposal, reviewer=reviewer, kind="approve")
    cases = {
        "status=failed,timed_out": [c, b],
        "risk_min=6": [c, b],
        "risk_max=5": [a],
        "action=docker.*": [b],
        "action=*.service_*": [c],
        "agent=other-bot": [c],
        "reviewer=rita": [c],
        "created_since=2026-11-01T09:05:00Z&created_until=2026-11-01T09:15:00Z": [b],
        "q=hello": [a],
        f"since_id={a.pk}": [c, b],
        "order=oldest": [a, b, c],
        "status=failed&agent=other-bot": [],
    }
    for query, expected in cases.items():
        assert ids(reviewer_api.get(f"{URL}?{query}")) == [e.pk for e in expected], query


def test_a_page_is_one_query_and_cursors_walk_every_row_once(agent, reviewer_api):
    for minute in range(12):
        ran(agent, minutes=minute)
    reviewer_api.get(URL)
    with CaptureQueriesContext(connection) as one:
        reviewer_api.get(URL, {"limit": 1})
    with CaptureQueriesContext(connection) as twelve:
        reviewer_api.get(URL, {"limit": 12})
    assert len(one) == len(twelve)
    seen, cursor = [], None
    while True:
        body = reviewer_api.get(URL, {"limit": 5, **({"cursor": cursor} if cursor else {})}).json()
        seen += [item["id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(Execution.objects.values_list("pk", flat=True), reverse=True)


def test_bad_filters_name_themselves(reviewer_api):
    says = error(reviewer_api.get(URL, {"status": "done"}))
    assert says == (
        "status: 'done' is not one of queued, running, succeeded, failed, timed_out, cancelled, lost"
    )
    assert error(reviewer_api.get(URL, {"risk": "high"})).startswith(
        "risk: not a parameter of this list; it takes action, agent, created_since,"
    )
    assert error(reviewer_api.get(URL, {"wait": "5"})).startswith("wait: not a parameter")
    assert error(reviewer_api.get(URL, {"order": "risk"})) == (
        "order: 'risk' is not one of newest, oldest"
    )
