"""Persistent sandbox sessions through /api/v1/sandboxes; every execute passes through policy.

Runs on the local backend, and again on docker and gvisor (each a session
container of its own), which skip — or fail under CI=true — where missing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from executions import services, sessions
from executions.models import Execution, SandboxSession
from tests.conftest import client_for
from tests.executions.conftest import require_backend

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True, params=["local", "docker", "gvisor"])
def session_backend(request, settings):
    """The backend the worker's sessions open on (``SANDBOX_BACKEND``)."""
    if request.param == "local":
        request.getfixturevalue("local_sandbox")
    else:
        require_backend(request.param)
        settings.SANDBOX_BACKEND = request.param
    return request.param


@pytest.fixture(autouse=True)
def inline_worker(monkeypatch):
    """This process plays the worker: sessions open here, executes run here."""
    monkeypatch.setattr(
        "executions.tasks.open_session.apply_async",
        lambda args, queue: sessions.open_session(*args),
    )
    yield
    sessions.registry().close_all()


@pytest.fixture
def api(agent_and_token):
    return client_for(agent_and_token[1])


def create(api) -> dict:
    response = api.post("/api/v1/sandboxes", {"language": "python"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "active", body
    return body


def execute(api, session_id: int, code: str) -> tuple[dict, Execution | None]:
    response = api.post(f"/api/v1/sandboxes/{session_id}/execute", {"code": code}, format="json")
    assert response.status_code == 201, response.json()
    proposal = response.json()
    if proposal["status"] != "approved":
        return proposal, None
    services.run(proposal["execution_id"])
    return proposal, Execution.objects.get(pk=proposal["execution_id"])


def test_state_survives_between_executes(api, session_backend):
    session = create(api)
    runtime_id = SandboxSession.objects.get(pk=session["id"]).runtime_id
    assert sessions.registry().get(runtime_id).backend == session_backend
    _, first = execute(api, session["id"], "x = 41")
    assert first.status == "succeeded"
    _, second = execute(api, session["id"], "print(x + 1)")
    assert (second.status, second.output_text("stdout")) == ("succeeded", "42\n")
    assert SandboxSession.objects.get(pk=session["id"]).executes == 2


def test_sessions_never_see_each_others_state(api):
    one, two = create(api), create(api)
    execute(api, one["id"], "secret = 'one'")
    _, peek = execute(api, two["id"], "print(secret)")
    assert peek.status == "failed"
    assert "NameError" in peek.output_text("stderr")


def test_every_execute_still_passes_through_policy(api):
    session = create(api)
    proposal, execution = execute(api, session["id"], "import os\nos.system('rm -rf /tmp/x')")
    assert proposal["status"] == "pending"
    assert proposal["action"] == "sandbox.execute"
    assert execution is None


def test_a_destroyed_session_refuses_executes(api):
    session = create(api)
    response = api.delete(f"/api/v1/sandboxes/{session['id']}")
    assert response.status_code == 200 and response.json()["status"] == "closed"
    refused = api.post(f"/api/v1/sandboxes/{session['id']}/execute", {"code": "1"}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["type"] == "conflict"
    listed = api.get("/api/v1/sandboxes").json()["sandboxes"]
    assert [s["status"] for s in listed] == ["closed"]


def test_idle_sessions_are_reaped_and_say_so(api, settings):
    session = create(api)
    execute(api, session["id"], "x = 1")
    row = SandboxSession.objects.get(pk=session["id"])
    old = timezone.now() - timedelta(minutes=settings.SANDBOX_SESSION_IDLE_MINUTES + 1)
    SandboxSession.objects.filter(pk=row.pk).update(last_used_at=old)
    assert sessions.reap_idle() == 1
    assert sessions.registry().get(row.runtime_id) is None
    assert SandboxSession.objects.get(pk=row.pk).closed_reason == "idle"


def test_a_session_that_lost_its_interpreter_fails_clearly_instead_of_starting_fresh(api):
    session = create(api)
    execute(api, session["id"], "x = 1")
    sessions.registry().destroy(SandboxSession.objects.get(pk=session["id"]).runtime_id)
    _, execution = execute(api, session["id"], "print(x)")
    assert execution.status == "failed"
    assert "state is gone" in execution.error


def test_capabilities_and_ownership_are_enforced(make_agent, api, reviewer_api):
    session = create(api)
    _, narrow = make_agent("narrow", ["script.execute"])
    assert client_for(narrow).post("/api/v1/sandboxes", {}, format="json").status_code == 403
    _, other = make_agent("other", ["*"])
    assert client_for(other).get(f"/api/v1/sandboxes/{session['id']}").status_code == 404
    assert reviewer_api.get(f"/api/v1/sandboxes/{session['id']}").status_code == 200
    assert reviewer_api.post("/api/v1/sandboxes", {}, format="json").status_code == 403


def test_another_agent_cannot_run_code_in_a_session_through_the_proposals_endpoint(make_agent, api):
    """The generic endpoint checks a session's owner as /sandboxes/{id}/execute does."""
    from approvals.models import Proposal

    session = create(api)
    execute(api, session["id"], "secret = 'mine'")
    _, other = make_agent("other", ["*"])
    proposals_before = Proposal.objects.count()
    for session_id in (session["id"], 10_000):  # someone else's, and none at all: one answer
        response = client_for(other).post(
            "/api/v1/proposals",
            {
                "action": "sandbox.execute",
                "parameters": {"session_id": session_id, "code": "print(secret)"},
                "reason": "borrow",
            },
            format="json",
        )
        assert response.status_code == 400, response.json()
        message = response.json()["error"]["message"]
        assert f"sandbox session {session_id} does not exist or is not yours" in message
    assert Proposal.objects.count() == proposals_before
    _, own = execute(api, session["id"], "print(secret)")  # the owner still can
    assert own.status == "succeeded"


@pytest.mark.parametrize(
    "body", [{"language": "cobol"}, [], {"language": None}], ids=["language", "list", "null"]
)
def test_bad_create_requests_are_400(api, body):
    response = api.post("/api/v1/sandboxes", body, format="json")
    assert response.status_code == 400
    assert SandboxSession.objects.count() == 0
