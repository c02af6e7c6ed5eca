"""Every console view: anonymous → login, agent token → refused, outsider → 403, roles → in."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from approvals.models import Agent, Proposal
from approvals.notify.models import ReviewerPreferences
from executions.models import Execution

from .conftest import logged_in

# (url name, kwargs from the objects, method, POST data, admin only)
VIEWS = [
    ("home", {}, "get", None, False),
    ("queue", {}, "get", None, False),
    ("overview", {}, "get", None, False),
    ("proposal", {"pk": "proposal"}, "get", None, False),
    ("decide", {"pk": "proposal", "kind": "approve"}, "post", {"comment": "ok"}, False),
    ("break-glass-reviewed", {"pk": "proposal"}, "post", {}, False),
    ("reveal", {"pk": "proposal"}, "post", {}, False),
    ("history", {}, "get", None, False),
    ("profile", {}, "get", None, False),
    ("profile", {}, "post", {"console": "on", "bands": ["high"]}, False),
    ("profile-slack-code", {}, "post", {}, False),
    ("profile-slack-unlink", {}, "post", {}, False),
    ("execution", {"pk": "execution"}, "get", None, False),
    ("execution-status", {"pk": "execution"}, "get", None, False),
    ("cancel", {"pk": "execution"}, "post", {}, False),
    ("policy", {}, "get", None, True),
    ("policy-versions", {}, "get", None, True),
    ("policy-suggestions", {}, "get", None, True),
    ("teams", {}, "get", None, True),
    ("agents", {}, "get", None, True),
    ("agent-action", {"pk": "agent", "operation": "revoke"}, "post", {}, True),
    ("agent-action", {"pk": "agent", "operation": "pause"}, "post", {"reason": "r"}, True),
    ("agent-action", {"pk": "agent", "operation": "resume"}, "post", {"reason": "r"}, True),
    ("agents-all", {"operation": "pause"}, "post", {"reason": "r"}, True),
    ("agents-all", {"operation": "resume"}, "post", {"reason": "r"}, True),
    ("upstreams", {}, "get", None, True),
    ("users", {}, "get", None, True),
    ("set-reviewer", {"pk": "outsider", "operation": None}, "post", {"reviewer": "on"}, True),
    ("audit", {}, "get", None, True),
    ("deliveries", {}, "get", None, True),
]
IDS = ["-".join(filter(None, (view[0], view[1].get("operation"), view[2]))) for view in VIEWS]


@pytest.fixture
def objects(proposal, execution, agent, outsider):
    return {"proposal": proposal, "execution": execution, "agent": agent, "outsider": outsider}


def url_for(name: str, kwargs: dict, objects: dict) -> str:
    resolved = {
        key: (objects[value].pk if value in objects else value)
        for key, value in kwargs.items()
        if value is not None
    }
    return reverse(f"console:{name}", kwargs=resolved)


def call(client: Client, view, objects: dict, **extra):
    name, kwargs, method, data, _ = view
    url = url_for(name, kwargs, objects)
    return getattr(client, method)(url, data or {}, **extra)


def state(objects: dict) -> tuple:
    """What a refused request must leave alone."""
    return (
        Proposal.objects.get(pk=objects["proposal"].pk).status,
        Execution.objects.get(pk=objects["execution"].pk).status,
        Agent.objects.get(pk=objects["agent"].pk).is_active,
        Agent.objects.get(pk=objects["agent"].pk).paused_at,
        objects["outsider"].groups.count(),
        ReviewerPreferences.objects.count(),
    )


@pytest.mark.django_db
@pytest.mark.parametrize("view", VIEWS, ids=IDS)
def test_anonymous_visitors_are_sent_to_the_login_page(view, objects):
    before = state(objects)
    response = call(Client(), view, objects)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")
    assert state(objects) == before


@pytest.mark.django_db
@pytest.mark.parametrize("view", VIEWS, ids=IDS)
def test_an_agent_token_does_not_open_the_console(view, objects, agent_and_token):
    before = state(objects)
    response = call(Client(), view, objects, HTTP_AUTHORIZATION=f"Bearer {agent_and_token[1]}")
    assert response.status_code in (302, 403)
    if response.status_code == 302:
        assert response["Location"].startswith(reverse("login"))
    assert state(objects) == before


@pytest.mark.django_db
@pytest.mark.parametrize("view", VIEWS, ids=IDS)
def test_a_user_without_review_rights_gets_403(view, objects, outsider):
    before = state(objects)
    response = call(logged_in(outsider), view, objects)
    assert response.status_code == 403
    assert state(objects) == before


@pytest.mark.django_db
@pytest.mark.parametrize("view", VIEWS, ids=IDS)
def test_reviewers_open_review_pages_and_not_admin_pages(view, objects, reviewer):
    response = call(logged_in(reviewer), view, objects)
    if view[4]:
        assert response.status_code == 403
    else:
        assert response.status_code in (200, 302), response.content[:500]


@pytest.mark.django_db
@pytest.mark.parametrize("view", VIEWS, ids=IDS)
def test_admins_open_every_page(view, objects, admin_user):
    response = call(logged_in(admin_user), view, objects)
    assert response.status_code in (200, 302), response.content[:500]
