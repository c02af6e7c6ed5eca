"""Host actions run on the host they name and nowhere else.

The queue (``host.<host>``), policy rules per host, the claim that refuses a
worker of another host, the sweeper that re-dispatches to the same queue, and
the console that says which host's worker a queued action waits for. Service
actions run a real stand-in for systemctl (systemd does not run here).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework import serializers

from approvals.core.services import submit
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import DEFAULT_POLICY, current_policy
from audit.models import AuditEvent
from executions import services
from executions.actions import get_action
from executions.models import Execution


@pytest.fixture
def sent(monkeypatch) -> list[tuple[int, str]]:
    """What was enqueued, as (execution id, queue); nothing reaches a broker."""
    calls: list[tuple[int, str]] = []
    monkeypatch.setattr(
        "executions.tasks.run_execution.apply_async",
        lambda args, queue: calls.append((args[0], queue)),
    )
    return calls


@pytest.fixture
def systemctl(tmp_path: Path, settings) -> Path:
    """A stand-in systemctl that says which host name it was asked about."""
    path = tmp_path / "systemctl"
    path.write_text('#!/bin/sh\necho "systemctl $*"\n')
    path.chmod(0o755)
    settings.HOST_ACTIONS_SYSTEMCTL = str(path)
    return path


def propose(agent, capture, action: str = "host.service_status", **parameters):
    with capture(execute=True):
        payload = {"action": action, "parameters": {"service_name": "nginx", **parameters}}
        return submit(agent, payload).proposal


def test_it_routes_a_host_action_to_the_queue_of_the_host_it_names(
    agent, sent, django_capture_on_commit_callbacks
):
    proposal = propose(agent, django_capture_on_commit_callbacks, host="host-b")

    assert proposal.status == "approved"
    execution = proposal.execution
    assert execution.parameters["host"] == "host-b"
    assert execution.queue == "host.host-b"
    assert sent == [(execution.pk, "host.host-b")]
    assert proposal.summary == "host.service_status(service=nginx, host=host-b)"


def test_it_fills_in_the_deployments_default_host(
    agent, sent, settings, django_capture_on_commit_callbacks
):
    settings.HOST_ACTIONS_DEFAULT_HOST = "console-host"

    proposal = propose(agent, django_capture_on_commit_callbacks)

    assert proposal.parameters["host"] == "console-host"
    assert sent == [(proposal.execution_id, "host.console-host")]


def test_it_asks_for_a_host_where_the_deployment_has_several(agent_api, settings, sent):
    settings.HOST_ACTIONS_DEFAULT_HOST = ""

    response = agent_api.post(
        "/api/v1/proposals",
        {"action": "host.restart_service", "parameters": {"service_name": "nginx"}},
        format="json",
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "validation_error"
    assert "host" in error["message"]
    assert sent == []


@pytest.mark.parametrize(
    "host",
    ["", " host-a", "-a", "a-", "a b", "a/b", "a..b", ".a", "host;rm", "x" * 64, "a." * 127 + "a"],
)
def test_it_refuses_a_malformed_host(host):
    with pytest.raises(serializers.ValidationError) as excinfo:
        get_action("host.exec").validate({"command": "uptime", "host": host})
    assert "host" in excinfo.value.detail


@pytest.mark.parametrize("host", ["host-a", "db_1", "web-2.example.org", "a", "x" * 63])
def test_it_accepts_host_names(host):
    assert (
        get_action("host.kill_process").validate({"target": "nginx", "host": host})["host"] == host
    )


def test_admins_allow_and_deny_per_host(agent, sent, django_capture_on_commit_callbacks):
    version = current_policy().version + 1
    data = {**DEFAULT_POLICY, "deny": [{"kind": "host", "pattern": "db-*", "note": "databases"}]}
    PolicyVersion.objects.create(version=version, data=data, comment="no host actions on db-*")

    denied = propose(agent, django_capture_on_commit_callbacks, host="db-1")
    allowed = propose(agent, django_capture_on_commit_callbacks, host="web-1")

    assert denied.status == "denied"
    assert denied.decision_path["rule"] == "host:db-*"
    assert denied.execution_id is None
    assert allowed.status == "approved"
    assert sent == [(allowed.execution_id, "host.web-1")]


@pytest.mark.django_db(transaction=True)
def test_a_worker_of_another_host_leaves_it_queued_and_its_own_host_runs_it(
    agent, sent, settings, systemctl
):
    proposal = submit(
        agent,
        {
            "action": "host.service_status",
            "parameters": {"service_name": "nginx", "host": "host-b"},
        },
    ).proposal

    settings.WORKER_HOSTNAME = "host-a"
    assert services.run(proposal.execution_id) is None
    execution = Execution.objects.get(pk=proposal.execution_id)
    assert (execution.status, execution.worker_host, execution.started_at) == ("queued", "", None)
    started = AuditEvent.objects.filter(verb="execution.running", object_id=str(execution.pk))
    assert not started.exists()  # the refused claim rolled back whole

    settings.WORKER_HOSTNAME = "host-b"
    services.run(proposal.execution_id)
    execution.refresh_from_db()
    assert (execution.status, execution.worker_host) == ("succeeded", "host-b")
    assert execution.output_text("stdout") == "systemctl status nginx\n"


def test_the_sweeper_redispatches_a_host_action_to_its_own_host_only(
    agent, sent, settings, django_capture_on_commit_callbacks
):
    proposal = propose(agent, django_capture_on_commit_callbacks, host="host-b")
    long_ago = timezone.now() - timedelta(seconds=settings.REQUEUE_AFTER_SECONDS + 5)
    Execution.objects.filter(pk=proposal.execution_id).update(
        created_at=long_ago, dispatched_at=long_ago
    )

    assert services.sweep() == {"requeued": 1, "lost": 0}
    assert services.sweep() == {"requeued": 0, "lost": 0}  # dispatched just now
    assert sent == [(proposal.execution_id, "host.host-b")] * 2


def test_the_console_says_which_hosts_worker_a_queued_action_waits_for(
    agent, reviewer, sent, django_capture_on_commit_callbacks
):
    proposal = propose(agent, django_capture_on_commit_callbacks, host="host-b")
    browser = Client()
    browser.force_login(reviewer)

    for page in (f"/proposals/{proposal.pk}/", f"/executions/{proposal.execution_id}/"):
        html = browser.get(page).content.decode()
        assert "waiting for host-b's worker" in html, page
        assert "<code>host.host-b</code>" in html, page

    Execution.objects.filter(pk=proposal.execution_id).update(status="running")
    html = browser.get(f"/executions/{proposal.execution_id}/").content.decode()
    assert "waiting-for-host" not in html
