"""Batch decisions: ``POST /api/v1/proposals/approve|reject`` with ``{"ids", "comment"}``, and
the console's page that decides the rows selected in the queue after one step-up."""

from __future__ import annotations

from urllib.parse import quote, unquote

import pytest

from approvals.models import Decision, Proposal
from audit.models import AuditEvent
from tests.approvals.test_cascade import propose
from tests.approvals.test_routing import api_of, call, cast  # noqa: F401 - fixture
from tests.conftest import _user, use_policy, with_fresh_factor

RISKY = {
    "action": "script.execute",
    "parameters": {"language": "python", "code": "import os\nos.system('rm -rf /tmp/x')"},
    "reason": "clean up",
}


def held(agent_api, tool: str = "billing.report", **arguments) -> dict:
    made = propose(agent_api, call(tool, **arguments))
    assert made["status"] == "pending", made
    return made


def batch(api, kind: str, body) -> tuple[int, dict]:
    response = api.post(f"/api/v1/proposals/{kind}", body, format="json")
    return response.status_code, response.json()


def test_a_batch_mixing_every_case_answers_one_result_per_id_and_decides_the_rest(
    cast,  # noqa: F811
    agent_api,
    settings,
):
    settings.STEP_UP_MIN_RISK = 7
    plain = [held(agent_api, n=i) for i in range(3)]
    routed = held(agent_api, "db.drop_index", name="orders_idx")  # dba and sre only
    risky = propose(agent_api, RISKY)
    assert risky["status"] == "pending" and risky["risk"]["score"] >= 7
    api_of(cast["fiona"]).post(f"/api/v1/proposals/{plain[2]['id']}/reject", {}, format="json")
    ids = [plain[0]["id"], 999_999, routed["id"], plain[2]["id"], risky["id"], plain[1]["id"]]

    status, body = batch(api_of(cast["rita"]), "approve", {"ids": ids, "comment": "batch"})

    assert status == 200, body
    results = {r["id"]: r for r in body["results"]}
    assert [r["id"] for r in body["results"]] == ids
    assert results[plain[0]["id"]] == {"id": plain[0]["id"], "status": "approved"}
    assert results[plain[1]["id"]] == {"id": plain[1]["id"], "status": "approved"}
    assert results[999_999]["error"]["type"] == "not_found"
    assert results[routed["id"]]["error"]["type"] == "not_a_required_reviewer"
    assert results[plain[2]["id"]]["error"]["type"] == "conflict"
    step_up = results[risky["id"]]["error"]
    assert step_up["type"] == "step_up_required"
    assert step_up["url"].endswith(f"/queue/approve/?ids={risky['id']}&comment=batch")
    assert all(
        set(r["error"]) <= {"type", "message", "url"} for r in results.values() if "error" in r
    )
    # Decided one by one: each its own decision and audit entries; the refused untouched.
    statuses = dict(Proposal.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert statuses[routed["id"]] == statuses[risky["id"]] == "pending"
    assert Decision.objects.filter(reviewer=cast["rita"], comment="batch").count() == 2
    approved = AuditEvent.objects.filter(verb="proposal.decision.approve", actor="user:rita")
    assert sorted(int(e.object_id) for e in approved) == sorted([plain[0]["id"], plain[1]["id"]])


def test_a_batch_keeps_each_proposals_quorum_and_team(cast, agent_api):  # noqa: F811
    routed = [held(agent_api, "db.drop_index", name=f"i{i}") for i in range(2)]
    ids = [p["id"] for p in routed]
    status, body = batch(api_of(cast["alice"]), "approve", {"ids": ids})
    assert status == 200 and [r["status"] for r in body["results"]] == ["pending", "pending"]
    status, body = batch(api_of(cast["sam"]), "approve", {"ids": ids, "comment": "sre ok"})
    assert [r["status"] for r in body["results"]] == ["approved", "approved"]
    teams = set(Decision.objects.filter(proposal_id__in=ids).values_list("team", flat=True))
    assert teams == {"dba", "sre"}


def test_a_batch_rejection_rejects_each(agent_api, reviewer_api):
    ids = [held(agent_api, n=i)["id"] for i in range(3)]
    status, body = batch(reviewer_api, "reject", {"ids": ids + ids[:1], "comment": "no"})
    assert status == 200
    assert body["results"] == [{"id": pk, "status": "rejected"} for pk in ids]  # each once


def test_ones_own_agents_proposals_are_refused_in_a_batch_as_alone(db, reviewer_api, reviewer):
    from approvals.core.tokens import create_agent
    from tests.conftest import client_for

    _, token = create_agent("ritas-bot", ["*"], reviewer)
    own = held(client_for(token))
    status, body = batch(reviewer_api, "approve", {"ids": [own["id"]]})
    assert status == 200 and body["results"][0]["error"]["type"] == "permission_denied"


@pytest.mark.parametrize(
    "body",
    [
        [1, 2],
        {},
        {"ids": []},
        {"ids": "1,2"},
        {"ids": ["a"]},
        {"ids": [0]},
        {"ids": [2**64]},
        {"ids": list(range(1, 102))},
        {"ids": [1], "comment": "x" * 4001},
    ],
)
def test_a_batch_that_cannot_be_read_is_refused_whole_and_decides_nothing(
    agent_api, reviewer_api, body
):
    pk = held(agent_api)["id"]
    status, answer = batch(reviewer_api, "approve", body)
    assert status == 400 and answer["error"]["type"] == "validation_error", answer
    assert Proposal.objects.get(pk=pk).status == "pending"


def test_agents_and_people_without_review_rights_may_decide_nothing(agent_api, outsider_api):
    pk = held(agent_api)["id"]
    for api in (agent_api, outsider_api):
        status, answer = batch(api, "approve", {"ids": [pk]})
        assert status == 403 and answer["error"]["type"] == "permission_denied"
    assert Proposal.objects.get(pk=pk).status == "pending"


# --- the console ---------------------------------------------------------------------------


def test_the_console_confirms_the_selection_then_decides_it(agent_api, reviewer, client):
    ids = [held(agent_api, n=i)["id"] for i in range(3)]
    client.force_login(reviewer)
    page = client.get(f"/queue/approve/?ids={ids[0]}&ids={ids[1]},{ids[2]}&ids=424242")
    assert page.status_code == 200
    text = page.content.decode()
    assert all(f'id="decide-many-{pk}"' in text for pk in ids)
    assert "No such proposal: #424242" in text
    answer = client.post(
        "/queue/approve/",
        {"ids": ",".join(map(str, ids)), "comment": "all fine", "next": "/queue/"},
    )
    assert answer.status_code == 302 and answer["Location"] == "/queue/"
    assert set(Proposal.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"approved"}
    shown = client.get("/queue/").content.decode()
    assert f"You approved 3 proposal(s): #{ids[0]}, #{ids[1]}, #{ids[2]}." in shown


def test_one_step_up_covers_every_risky_proposal_of_the_selection(agent_api, settings, client):
    settings.STEP_UP_MIN_RISK = 7
    reviewer = _user("rhea", reviewer=True)
    ids = [propose(agent_api, {**RISKY, "idempotency_key": f"r{i}"})["id"] for i in range(3)]
    client.force_login(reviewer)
    asked = client.post("/queue/reject/", {"ids": ids, "comment": "too broad"})
    assert asked.status_code == 302 and asked["Location"].startswith("/step-up/?next=")
    back = unquote(asked["Location"].removeprefix("/step-up/?next="))
    assert back == "/queue/reject/?ids=" + quote(",".join(map(str, ids))) + "&comment=too+broad"
    assert client.get(back).status_code == 200  # the page the step-up returns to
    assert set(Proposal.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"pending"}
    with_fresh_factor(client, reviewer)
    done = client.post("/queue/reject/", {"ids": ids, "comment": "too broad"})
    assert done.status_code == 302
    assert set(Proposal.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"rejected"}
    assert AuditEvent.objects.filter(verb="proposal.decision.reject").count() == 3


@pytest.mark.parametrize(
    "query", ["ids=abc", "ids=", "ids=-3", "ids=" + ",".join(["1"] * 2) + ",x"]
)
def test_the_console_answers_a_bad_selection_with_a_message(reviewer, client, query):
    client.force_login(reviewer)
    answer = client.get(f"/queue/approve/?{query}")
    assert answer.status_code == 302 and answer["Location"] == "/queue/"


def test_an_unknown_decision_kind_is_a_404(reviewer, client):
    client.force_login(reviewer)
    assert client.get("/queue/maybe/?ids=1").status_code == 404


def test_the_queue_rows_say_what_why_and_where(agent_api, reviewer, client):
    use_policy(review=[{"kind": "action", "pattern": "docker.*", "note": "t"}])
    script = propose(
        agent_api,
        {
            "action": "script.execute",
            "parameters": {
                "language": "python",
                "code": "import os\nimport shutil\nprint('x')\nshutil.rmtree('/srv/cache')\n",
            },
            "reason": "free disk on db-prod-1, WAL filled the volume",
        },
    )
    tool = held(agent_api, "billing.refund", customer="cus_42", amount_cents=125000)
    client.force_login(reviewer)
    text = client.get("/queue/?view=all").content.decode()
    assert "python: shutil.rmtree(&#x27;/srv/cache&#x27;)" in text
    assert "free disk on db-prod-1, WAL filled the volume" in text
    assert "uses shutil.rmtree (deletes directory trees)" in text
    assert "script.execute starts at risk" not in text
    assert "billing.refund(customer=&quot;cus_42&quot;, amount_cents=125000)" in text
    assert "tool billing.refund" in text
    assert f'id="pick-{script["id"]}"' in text and f'id="pick-{tool["id"]}"' in text
    assert Decision.objects.count() == 0


def test_identical_proposals_are_one_row_and_one_decision_settles_them(agent_api, reviewer, client):
    same = [held(agent_api, "billing.report", month="2026-10") for _ in range(3)]
    other = held(agent_api, "billing.report", month="2026-09")
    ids = [p["id"] for p in same]
    client.force_login(reviewer)
    text = client.get("/queue/?view=all").content.decode()
    assert text.count('class="pick"') == 2
    group = ",".join(map(str, ids))
    assert f'value="{group}"' in text and f'data-ids="{group}"' in text and "×3" in text
    assert f'id="proposal-row-{other["id"]}"' in text
    assert all(f'id="proposal-row-{pk}"' not in text for pk in ids[1:])
    client.post("/queue/approve/", {"ids": group, "next": "/queue/"})
    assert set(Proposal.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"approved"}
    assert Proposal.objects.get(pk=other["id"]).status == "pending"
    assert Decision.objects.filter(proposal_id__in=ids).count() == 3  # each its own


def test_proposals_carrying_a_credential_are_never_grouped(agent_api, reviewer, client):
    key = "AKIA" + "QWERTYUIOPASDFGH"
    made = [held(agent_api, "aws.describe", access_key=key) for _ in range(2)]
    client.force_login(reviewer)
    text = client.get("/queue/?view=all").content.decode()
    assert all(f'id="proposal-row-{p["id"]}"' in text for p in made)
    assert "×2" not in text
