"""The admins' page for review teams: who is in each, why, and what waits for each team."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.access import admin_required
from approvals.core import services
from approvals.models import Proposal
from approvals.policy.rules import current_policy
from approvals.routing.membership import sources


@admin_required
def teams(request: HttpRequest) -> HttpResponse:
    """Each team of the policy in force: its members and where each membership comes from
    (the policy's ``members`` or a provider group at the last sign-in), and the pending
    proposals whose route still waits for it (escalated ones for the teams they went to)."""
    policy = current_policy()
    waiting = services.waiting_by_team(Proposal.objects.pending().select_related("agent"))
    shown = [
        {
            "team": team,
            "people": sources(team),
            "routes": [r.label() for r in policy.reviews if team.name in dict(r.require)],
            "waiting": waiting.get(team.name, []),
        }
        for team in policy.teams.values()
    ]
    return render(request, "approvals/teams.html", {"teams": shown, "policy": policy})
