"""A reviewer who must see a masked credential reveals it: a fresh second factor, audited.

The proposal's page shows its parameters and reason masked (``AKIA…``);
``reveal`` answers the same page once with the originals unsealed
(``approvals.core.credentials``), never cached, and the audit trail records
who saw which proposal's credentials and how they proved it.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts import stepup
from accounts.access import reviewer_required
from approvals.core import credentials
from approvals.review.views.proposals import (
    beside,
    highlighted,
    other_parameters,
    proposal_context,
    proposal_for_page,
)
from audit.services import actor_label, record


@require_POST
@reviewer_required
@stepup.fresh_factor_required(
    then=lambda request, pk: reverse("console:proposal", args=[pk]) + "#reveal",
    purpose="Reveal the credentials of a proposal",
)
@never_cache
def reveal(request: HttpRequest, pk: int) -> HttpResponse:
    proposal = proposal_for_page(pk)
    if not proposal.sealed:
        messages.info(request, f"Proposal {pk} holds no masked credential.")
        return redirect("console:proposal", pk=pk)
    originals = credentials.originals(proposal.sealed)
    record(
        actor_label(request.user),
        "proposal.revealed",
        proposal,
        **stepup.Authentication.of_session(request).as_audit(),
    )
    shown = proposal.parameters, proposal.reason
    proposal.parameters, proposal.reason = originals["parameters"], originals["reason"]
    try:
        context = {
            **proposal_context(proposal, request.user),
            "code_blocks": highlighted(proposal),
            "parameters_json": other_parameters(proposal),
            **beside(proposal, request.user),  # the code marked again, the history, the target
            "revealed": True,
        }
    finally:
        proposal.parameters, proposal.reason = shown
    return render(request, "approvals/detail.html", context)
