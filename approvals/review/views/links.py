"""One-tap review from a mail: the page a review link opens, and the tap that decides."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from accounts import stepup
from approvals.core import services
from approvals.notify import review_links
from approvals.review import forms
from approvals.review.views.proposals import (
    STATUS_FOR_ERROR,
    highlighted,
    other_parameters,
    proposal_for_page,
)


def _link_page(request: HttpRequest, link, error: str = "", status: int = 200) -> HttpResponse:
    proposal = proposal_for_page(link.proposal_id)
    context = {
        "proposal": proposal,
        "reviewer": link.reviewer,
        "decisions": proposal.decisions.all(),
        "code_blocks": highlighted(proposal),
        "parameters_json": other_parameters(proposal),
        "error": error,
        "step_up": stepup.needed_for_risk(proposal.risk_score),
    }
    return render(request, "approvals/review_link.html", context, status=status)


def _refused(request: HttpRequest, refusal: review_links.LinkRefused) -> HttpResponse:
    context = {"refused": refusal.message}
    return render(request, "approvals/review_link.html", context, status=refusal.status)


@never_cache
@require_http_methods(["GET", "POST"])
def review_link(request: HttpRequest, token: str) -> HttpResponse:
    """The page a review mail links to. Opening it decides nothing; a tap (a POST) does.

    No sign-in: the signed link stands for its reviewer, for this one decision.
    """
    try:
        link = review_links.open_link(token, request.user)
    except review_links.LinkRefused as refusal:
        return _refused(request, refusal)
    if request.method == "GET":
        return _link_page(request, link)
    form = forms.LinkDecisionForm(request.POST)
    if not form.is_valid():
        return _link_page(
            request, link, "Choose approve or reject (a comment is at most 4000 characters).", 400
        )
    kind = form.cleaned_data["kind"]
    try:
        review_links.decide(token, kind, form.cleaned_data["comment"], request.user)
    except review_links.LinkRefused as refusal:
        return _refused(request, refusal)
    except services.ProposalError as exc:
        status = 403 if exc.url else STATUS_FOR_ERROR.get(exc.kind, 400)
        return _link_page(request, link, exc.message, status)
    proposal = proposal_for_page(link.proposal_id)
    context = {"proposal": proposal, "reviewer": link.reviewer, "done": kind}
    return render(request, "approvals/review_link.html", context)
