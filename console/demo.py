"""Demo users and a demo agent for the embedded deployment (``serve --demo``)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from accounts.roles import REVIEWERS_GROUP
from approvals.core.tokens import create_agent, rotate_agent_token
from approvals.models import Agent

DEMO_PASSWORD = "airlock-demo"
DEMO_AGENT = "demo-agent"
DEMO_CAPABILITIES = [
    "script.execute", "sandbox.*", "docker.*", "host.service_status", "tool.call",
]  # fmt: skip


@transaction.atomic
def ensure_demo() -> dict:
    """Create (or reuse) the demo cast; the agent gets a fresh token, returned once."""
    User = get_user_model()
    reviewers, _ = Group.objects.get_or_create(name=REVIEWERS_GROUP)
    users = {}
    for username, superuser in (("admin", True), ("reviewer", False), ("reviewer2", False)):
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User(username=username, is_superuser=superuser, is_staff=superuser)
            user.set_password(DEMO_PASSWORD)
            user.save()
        if not superuser:
            user.groups.add(reviewers)
        users[username] = DEMO_PASSWORD
    agent = Agent.objects.filter(name=DEMO_AGENT).first()
    if agent is None:
        agent, token = create_agent(DEMO_AGENT, DEMO_CAPABILITIES, actor="system")
    else:
        token = rotate_agent_token(agent, actor="system")
    return {"users": users, "agent": agent.name, "token": token}
