"""Every branch of the approval cascade, end to end through the API, with real notifications."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.utils import timezone

from approvals.core.services import expire_pending, warn_expiring
from approvals.models import Proposal
from approvals.notify import deliveries, webhooks
from approvals.notify.models import Webhook, WebhookDelivery
from approvals.policy.rules import update_policy
from audit.models import AuditEvent
from tests.conftest import client_for, use_policy

LOW = {"action": "script.execute", "parameters": {"language": "python", "code": "print(2 + 2)"}}
MEDIUM = {
    "action": "script.execute",
    "parameters": {"language": "python", "code": "import os\nprint(os.listdir('.'))"},
}
HIGH = {
    "action": "script.execute",
    "parameters": {"language": "python", "code": "import os\nos.system('rm -rf /tmp/x')"},
}


class Recorder(BaseHTTPRequestHandler):
    """A local endpoint: records requests and answers from a script of responses."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server = self.server
        server.requests.append({"headers": dict(self.headers), "body": body})
        status, payload, delay = server.script.pop(0) if server.script else server.default
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.requests, server.script, server.default = [], [], (200, "{}", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()


def propose(api, body):
    response = api.post("/api/v1/proposals", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def chat_answer(score: int, reason: str) -> str:
    content = json.dumps({"score": score, "reason": reason})
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})


def test_deny_list(agent_api):
    use_policy(deny=[{"kind": "language", "pattern": "bash", "note": "no shell scripts"}])
    body = propose(
        agent_api,
        {"action": "script.execute", "parameters": {"language": "bash", "code": "echo hi"}},
    )
    assert (body["status"], body["decision_path"]["step"]) == ("denied", "deny_list")
    assert body["decision_path"]["rule"] == "language:bash"
    assert body["decision_path"]["policy_version"] == 2
    assert body["execution_id"] is None


def test_allow_list_runs_even_high_risk(agent_api):
    use_policy(allow=[{"kind": "action", "pattern": "script.*", "note": "trusted"}])
    body = propose(agent_api, HIGH)
    assert (body["status"], body["decision_path"]["step"]) == ("approved", "allow_list")
    assert body["execution_id"]
    assert body["risk"]["score"] >= 7  # still scored and shown


def test_notify_list_runs_and_notifies_by_mail_webhook_and_console(
    agent_api, reviewer_with_mail, endpoint, eager_tasks
):
    use_policy(notify=[{"kind": "action", "pattern": "script.execute", "note": "tell people"}])
    Webhook.objects.create(name="ops", url=endpoint.url + "/hook", secret="s3cret")
    with eager_tasks(execute=True):
        body = propose(agent_api, MEDIUM)
    assert (body["status"], body["decision_path"]["step"]) == ("approved", "notify_list")
    assert body["execution_id"]
    [message] = mail.outbox
    assert message.to == ["rita@example.test"]
    assert f"/proposals/{body['id']}/" in message.body
    [request] = endpoint.requests
    expected = "sha256=" + hmac.new(b"s3cret", request["body"], hashlib.sha256).hexdigest()
    assert request["headers"]["X-Airlock-Signature"] == expected
    payload = json.loads(request["body"])
    assert payload["event"] == "notify_list"
    assert payload["proposal"]["url"].endswith(f"/proposals/{body['id']}/")
    assert WebhookDelivery.objects.get().state == "delivered"


def test_a_low_score_runs_at_once(agent_api):
    body = propose(agent_api, LOW)
    assert (body["status"], body["decision_path"]["step"]) == ("approved", "risk")
    assert body["risk"]["score"] < 4


def test_a_medium_score_waits_for_one_reviewer(
    agent_api, reviewer_api, reviewer_with_mail, eager_tasks
):
    with eager_tasks(execute=True):
        body = propose(agent_api, MEDIUM)
    assert (body["status"], body["required_approvals"]) == ("pending", 1)
    assert "waits for review" in mail.outbox[0].subject
    done = reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").json()
    assert done["status"] == "approved" and done["execution_id"]


def test_a_high_score_waits_for_two(agent_api, reviewer_api, reviewer2_api):
    body = propose(agent_api, HIGH)
    assert (body["status"], body["required_approvals"]) == ("pending", 2)
    one = reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").json()
    assert (one["status"], one["approvals_remaining"]) == ("pending", 1)
    two = reviewer2_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").json()
    assert two["status"] == "approved"


def test_any_rejection_rejects_even_after_an_approval(agent_api, reviewer_api, reviewer2_api):
    body = propose(agent_api, HIGH)
    reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json")
    done = reviewer2_api.post(
        f"/api/v1/proposals/{body['id']}/reject", {"comment": "no"}, format="json"
    ).json()
    assert done["status"] == "rejected" and done["execution_id"] is None


@pytest.fixture
def prevalidator(endpoint, settings):
    settings.PREVALIDATOR_URL = endpoint.url + "/v1"
    settings.PREVALIDATOR_MODEL = "judge"
    settings.PREVALIDATOR_TIMEOUT_SECONDS = 1
    use_policy(use_prevalidator=True)
    return endpoint


def test_prevalidator_up_can_raise_the_score(agent_api, prevalidator):
    prevalidator.script = [(200, chat_answer(8, "deletes things"), 0)]
    body = propose(agent_api, LOW)
    assert body["status"] == "pending"
    assert body["risk"]["score"] == 8
    assert any("pre-validator" in reason for reason in body["risk"]["reasons"])
    assert body["decision_path"]["prevalidator"]["ok"] is True
    sent = json.loads(prevalidator.requests[0]["body"])
    assert sent["model"] == "judge"


def test_prevalidator_up_and_agreeing_lets_low_risk_run(agent_api, prevalidator):
    prevalidator.script = [(200, chat_answer(1, "prints a number"), 0)]
    body = propose(
        agent_api, {"action": "docker.container_logs", "parameters": {"container": "web"}}
    )
    assert body["decision_path"]["step"] in ("allow_list", "risk")
    assert body["status"] == "approved"


def test_prevalidator_slow_sends_the_proposal_to_a_person(agent_api, prevalidator):
    prevalidator.script = [(200, chat_answer(0, "fine"), 3)]
    started = time.monotonic()
    body = propose(agent_api, LOW)
    assert time.monotonic() - started < 3
    assert (body["status"], body["decision_path"]["step"]) == ("pending", "prevalidator")
    assert "did not answer" in body["decision_path"]["reason"]


def test_prevalidator_down_sends_the_proposal_to_a_person(agent_api, prevalidator, settings):
    settings.PREVALIDATOR_URL = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    body = propose(agent_api, LOW)
    assert (body["status"], body["decision_path"]["step"]) == ("pending", "prevalidator")


def test_prevalidator_on_but_unconfigured_sends_the_proposal_to_a_person(agent_api, settings):
    settings.PREVALIDATOR_URL = ""
    use_policy(use_prevalidator=True)
    body = propose(agent_api, LOW)
    assert (body["status"], body["decision_path"]["step"]) == ("pending", "prevalidator")


def test_expiry_turns_pending_into_expired_and_the_agent_sees_it(
    agent_api, reviewer_with_mail, eager_tasks
):
    body = propose(agent_api, MEDIUM)
    Proposal.objects.filter(pk=body["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    with eager_tasks(execute=True):
        assert expire_pending() == 1
    seen = agent_api.get(f"/api/v1/proposals/{body['id']}").json()
    assert seen["status"] == "expired" and seen["execution_id"] is None
    assert AuditEvent.objects.filter(verb="proposal.expired", object_id=str(body["id"])).exists()


def test_a_warning_goes_out_once_before_expiry(agent_api, reviewer_with_mail, eager_tasks):
    with eager_tasks(execute=True):
        body = propose(agent_api, MEDIUM)
    mail.outbox.clear()
    proposal = Proposal.objects.get(pk=body["id"])
    almost = proposal.expires_at - timedelta(seconds=30)
    with eager_tasks(execute=True):
        assert warn_expiring(now=almost) == 1
        assert warn_expiring(now=almost) == 0
    [message] = mail.outbox
    assert "expires soon" in message.subject


def test_self_approval_is_refused_unless_policy_allows_it(make_agent, reviewer, reviewer_api):
    _, token = make_agent("mine", ["*"], owner=reviewer)
    body = propose(client_for(token), MEDIUM)
    assert (
        reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").status_code
        == 403
    )
    use_policy(self_approval=True)
    assert (
        reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").status_code
        == 200
    )


def test_per_agent_overrides_apply_to_that_agent_only(agent_api, make_agent):
    use_policy(agent_overrides={"requester": {"auto_approve_below": 7, "high_risk_at": 8}})
    assert propose(agent_api, MEDIUM)["status"] == "approved"
    _, other = make_agent("other", ["*"])
    assert propose(client_for(other), MEDIUM)["status"] == "pending"


def test_a_policy_edit_takes_effect_for_the_next_proposal_and_is_audited(agent_api, admin_user):
    assert propose(agent_api, MEDIUM)["status"] == "pending"
    data = {**_current_data(), "auto_approve_below": 7, "high_risk_at": 8}
    version = update_policy(data, admin_user, "let medium run")
    body = propose(agent_api, MEDIUM)
    assert body["status"] == "approved"
    assert body["decision_path"]["policy_version"] == version.version
    event = AuditEvent.objects.get(verb="policy.updated")
    assert event.actor == "user:ada"
    assert event.data["changes"]["auto_approve_below"] == [4, 7]


def test_an_invalid_policy_is_refused_and_nothing_changes(admin_user):
    from rest_framework.exceptions import ValidationError

    before = Proposal.objects.count(), _current_data()
    with pytest.raises(ValidationError):
        update_policy({**_current_data(), "high_risk_at": 2, "auto_approve_below": 5}, admin_user)
    with pytest.raises(ValidationError):
        update_policy({**_current_data(), "deny": [{"kind": "planet", "pattern": "*"}]}, admin_user)
    assert (Proposal.objects.count(), _current_data()) == before


def attempt(delivery_id: int) -> WebhookDelivery:
    """One more attempt of a webhook delivery, as its retry task makes it."""
    return deliveries.attempt(WebhookDelivery, delivery_id, webhooks.post)


def test_webhook_failures_are_retried_with_backoff_then_logged(
    endpoint, agent, eager_tasks, monkeypatch
):
    scheduled = []
    monkeypatch.setattr(
        deliveries, "schedule_retry", lambda log, pk, delay: scheduled.append(delay)
    )
    endpoint.script = [(500, "{}", 0), (502, "{}", 0)]
    Webhook.objects.create(name="flaky", url=endpoint.url, secret="k")
    with eager_tasks(execute=True):
        propose(client_for_agent(agent), MEDIUM)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("pending", 1, 500)
    assert attempt(delivery.pk).response_code == 502
    delivered = attempt(delivery.pk)
    assert (delivered.state, delivered.attempts) == ("delivered", 3)
    assert scheduled == [10, 20]


def test_a_webhook_that_never_answers_ends_failed(agent, eager_tasks, monkeypatch):
    monkeypatch.setattr(deliveries, "schedule_retry", lambda log, pk, delay: None)
    Webhook.objects.create(name="dead", url="http://127.0.0.1:9/hook", secret="k")
    with eager_tasks(execute=True):
        propose(client_for_agent(agent), MEDIUM)
    delivery = WebhookDelivery.objects.get()
    for _ in range(webhooks.WEBHOOK_MAX_ATTEMPTS - 1):
        delivery = attempt(delivery.pk)
    assert (delivery.state, delivery.attempts) == ("failed", webhooks.WEBHOOK_MAX_ATTEMPTS)
    assert delivery.error


# --- a sandbox with weak isolation -------------------------------------------------------


def test_with_a_weak_sandbox_low_risk_scripts_wait_for_a_person(agent_api, sandbox_isolation):
    sandbox_isolation.weak("local: a subprocess with rlimits only")
    body = propose(agent_api, LOW)
    assert (body["status"], body["decision_path"]["step"]) == ("pending", "weak_sandbox")
    assert body["required_approvals"] == 1 and body["execution_id"] is None
    assert (
        "weak isolation (local: a subprocess with rlimits only)" in body["decision_path"]["reason"]
    )
    assert body["decision_path"]["policy_step"] == "risk"


def test_with_a_weak_sandbox_the_allow_list_does_not_run_scripts_alone(
    agent_api, reviewer_api, sandbox_isolation
):
    sandbox_isolation.weak()
    use_policy(allow=[{"kind": "action", "pattern": "script.*", "note": "trusted"}])
    body = propose(agent_api, HIGH)
    assert (body["status"], body["required_approvals"]) == ("pending", 2)
    assert body["decision_path"]["policy_rule"] == "action:script.*"
    done = reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").json()
    assert (done["status"], done["approvals_remaining"]) == ("pending", 1)


def test_with_a_weak_sandbox_the_deny_list_still_denies(agent_api, sandbox_isolation):
    sandbox_isolation.weak()
    use_policy(deny=[{"kind": "language", "pattern": "bash", "note": "no shell"}])
    body = propose(
        agent_api, {"action": "script.execute", "parameters": {"language": "bash", "code": "id"}}
    )
    assert (body["status"], body["decision_path"]["step"]) == ("denied", "deny_list")


def test_with_a_weak_sandbox_other_actions_are_decided_as_usual(agent_api, sandbox_isolation):
    sandbox_isolation.weak()
    body = propose(
        agent_api, {"action": "host.service_status", "parameters": {"service_name": "x"}}
    )
    assert (body["status"], body["decision_path"]["step"]) == ("approved", "allow_list")


def test_an_admin_can_allow_the_weak_sandbox_and_it_is_audited(
    agent_api, admin_user, sandbox_isolation
):
    sandbox_isolation.weak()
    assert propose(agent_api, LOW)["status"] == "pending"
    update_policy({**_current_data(), "allow_weak_sandbox": True}, admin_user, "trusted agents")
    body = propose(agent_api, LOW)
    assert (body["status"], body["decision_path"]["step"]) == ("approved", "risk")
    event = AuditEvent.objects.get(verb="policy.updated")
    assert event.data["changes"]["allow_weak_sandbox"] == [False, True]


def test_network_on_the_local_backend_is_refused_up_front(agent_api, settings):
    from executions.sandboxes import status

    use_policy(script_network=True)
    settings.SANDBOX_BACKEND = "local"
    status.sandbox_status(refresh=True)
    body = {**LOW, "parameters": {**LOW["parameters"], "network": True}}
    try:
        response = agent_api.post("/api/v1/proposals", body, format="json")
    finally:
        settings.SANDBOX_BACKEND = "auto"
        status.sandbox_status(refresh=True)
    assert response.status_code == 422, response.json()
    assert response.json()["error"]["type"] == "sandbox_unsupported"
    assert "no network" in response.json()["error"]["message"]
    assert Proposal.objects.count() == 0


def client_for_agent(agent):
    from approvals.core.tokens import rotate_agent_token

    return client_for(rotate_agent_token(agent, "system"))


def _current_data() -> dict:
    from approvals.policy.rules import current_policy

    return current_policy().as_data()
