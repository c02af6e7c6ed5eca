"""The reviewers' pages for proposals: the queue, a proposal and its decision, history, the overview."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_http_methods
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import BashLexer, JavascriptLexer, PythonLexer, TextLexer

from accounts import stepup
from accounts.access import reviewer_required
from accounts.roles import is_admin
from approvals.choices import DecisionKind
from approvals.core import services
from approvals.models import Agent, Decision, Proposal
from approvals.review import charts, forms, overview
from approvals.review.grouping import group_identical
from approvals.review.history import history_of
from approvals.review.paging import CappedPaginator
from executions import targets

QUEUE_LIMIT = 200
HISTORY_PAGE_SIZE = 50
STATUS_FOR_ERROR = {
    "permission_denied": 403,
    "not_a_required_reviewer": 403,
    "not_found": 404,
    "conflict": 409,
}
LEXERS = {"python": PythonLexer, "bash": BashLexer, "javascript": JavascriptLexer}
CODE_PARAMETERS = ("code", "command")


def home(request: HttpRequest) -> HttpResponse:
    """The landing page: the overview for admins, the queue for reviewers."""
    if is_admin(request.user):
        return redirect("console:overview")
    return queue(request)


# --- queue ----------------------------------------------------------------------


QUEUE_VIEWS = ("mine", "all")  # "Needs me" (the default) and "All pending"


def queue_proposals(params, mine: list[int] | None = None) -> list[Proposal]:
    """Pending proposals, riskiest then oldest first, narrowed by the queue's filters (and to
    ``mine``, the ids of those waiting for the reviewer, in the "Needs me" view)."""
    form = forms.QueueFilterForm(params)
    queryset = Proposal.objects.review_queue().select_related("agent")
    if mine is not None:
        queryset = queryset.filter(pk__in=mine)
    return list(form.apply(queryset)[:QUEUE_LIMIT])


def queue_context(params, user) -> dict:
    """What the queue list partial needs; the websocket consumer renders it too."""
    view = params.get("view") if params.get("view") in QUEUE_VIEWS else "mine"
    mine = services.awaiting(user)
    proposals = queue_proposals(params, mine if view == "mine" else None)
    return {
        "proposals": group_identical(proposals),
        "view": view,
        "mine_count": len(mine),
        "filters_active": _has_filters(params),
        "truncated": len(proposals) == QUEUE_LIMIT,
    }


def _has_filters(params) -> bool:
    return any(params.get(name) for name in forms.QueueFilterForm.base_fields)


@reviewer_required
def queue(request: HttpRequest) -> HttpResponse:
    form = forms.QueueFilterForm(request.GET)
    context = {
        **queue_context(request.GET, request.user),
        "form": form,
        "agents": Agent.objects.values_list("name", flat=True),
        "actions": forms.action_choices(),
        "ws_url": "/ws/queue/?" + request.GET.urlencode(),
    }
    template = "approvals/queue.html"
    if request.htmx and request.htmx.target == "queue":
        template += "#queue"
    return render(request, template, context)


# --- proposal detail and decisions ----------------------------------------------


def proposal_for_page(pk: int) -> Proposal:
    decisions = Decision.objects.select_related("reviewer")
    return get_object_or_404(
        Proposal.objects.select_related("agent__owner", "execution").prefetch_related(
            Prefetch("decisions", queryset=decisions)
        ),
        pk=pk,
    )


def highlighted(
    proposal: Proposal, marked: list[int] | None = None
) -> list[tuple[str, SafeString]]:
    """(parameter name, highlighted HTML) for the parameters that hold code or a command;
    ``marked``: the lines of the code to mark (those its risk reasons point at), each
    with an anchor (``#code-line-N``)."""
    language = str(proposal.parameters.get("language", ""))
    blocks = []
    for name in CODE_PARAMETERS:
        value = proposal.parameters.get(name)
        if not isinstance(value, str):
            continue
        lexer = LEXERS.get(language, BashLexer if name == "command" else TextLexer)()
        marks = (
            {"hl_lines": marked, "lineanchors": "code-line"} if marked and name == "code" else {}
        )
        html = highlight(value, lexer, HtmlFormatter(cssclass="code", linenos="table", **marks))
        blocks.append((name, mark_safe(html)))  # noqa: S308 - Pygments escapes the source
    return blocks


def risk_lines(proposal: Proposal) -> list[dict]:
    """``[{"reason", "lines"}]``: the lines of the script each risk reason points at, as
    stored with the proposal (``risk_lines``, when its analysers knew them), kept to lines
    the code has."""
    located = getattr(proposal, "risk_lines", None)
    code = proposal.parameters.get("code")
    if not located or not isinstance(located, list) or not isinstance(code, str):
        return []
    count = len(code.splitlines()) or 1
    found = []
    for entry in located:
        lines = entry.get("lines") if isinstance(entry, dict) else None
        kept = sorted(
            {
                n
                for n in lines or ()
                if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= count
            }
        )
        if kept:
            found.append({"reason": str(entry.get("reason", "")), "lines": kept})
    return found


def beside(proposal: Proposal, user) -> dict:
    """What the page shows beside the proposal: the lines of its code its risk reasons point
    at, the agent's history (``approvals.review.history``), the live state of its target
    (``executions.targets``: within a second, or "unknown")."""
    located = risk_lines(proposal)
    context = {
        "risk_lines": located,
        "history": history_of(proposal),
        "target_state": targets.read(proposal.action, proposal.parameters),
        "may_open_suggestions": is_admin(user),
    }
    if located:  # the code again, with those lines marked
        marked = sorted({n for entry in located for n in entry["lines"]})
        context["code_blocks"] = highlighted(proposal, marked)
    return context


def other_parameters(proposal: Proposal) -> str:
    rest = {k: v for k, v in proposal.parameters.items() if k not in CODE_PARAMETERS}
    return json.dumps(rest, indent=2, sort_keys=True) if rest else ""


def proposal_context(proposal: Proposal, user, error: str = "") -> dict:
    """What the decision panel shows; the consumer uses it for live updates too."""
    decisions = proposal.decisions.all()
    decided_by_user = any(d.reviewer_id == user.pk for d in decisions)
    pending = proposal.is_pending and not decided_by_user
    return {
        "proposal": proposal,
        "decisions": decisions,
        "decided_by_user": decided_by_user,
        "required_reviews": services.required_reviews_of(proposal, decisions),
        # Why the buttons are off for this reviewer (the route's teams, their own agent).
        "cannot_decide": services.why_not(user, proposal) if pending else "",
        "may_break_glass": pending and is_admin(user),
        "error": error,
        "form": forms.DecisionForm(),
    }


@reviewer_required
def proposal_detail(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        proposal = proposal_for_page(pk)
    except Http404:
        archived = (
            f"manage.py retention --proposal {pk}" if settings.RETENTION_PROPOSAL_DAYS else ""
        )
        return render(request, "console/404.html", {"archived": archived}, status=404)
    context = {
        **proposal_context(proposal, request.user),
        "code_blocks": highlighted(proposal),
        "parameters_json": other_parameters(proposal),
        **beside(proposal, request.user),
    }
    return render(request, "approvals/detail.html", context)


@require_http_methods(["GET", "POST"])
@reviewer_required
def decide(request: HttpRequest, pk: int, kind: str) -> HttpResponse:
    """POST: decide. GET: the page that completes a decision begun elsewhere (a mail, Slack,
    a token) or before a step-up: the proposal, the decision asked for, its comment kept."""
    if kind not in DecisionKind.values:
        return render(request, "console/404.html", status=404)
    if request.method == "GET":
        return _confirm_page(request, pk, kind)
    form = forms.DecisionForm(request.POST)
    comment = form.cleaned_data["comment"] if form.is_valid() else ""
    break_glass = form.cleaned_data.get("break_glass", False) if form.is_valid() else False
    error, status = "", 200
    if not form.is_valid():
        error, status = "the comment is too long", 400
    else:
        how = stepup.Authentication.of_session(request)
        try:
            services.decide(
                pk, request.user, kind, comment, authentication=how, break_glass=break_glass
            )
        except services.ProposalError as exc:
            if exc.kind == "step_up_required":
                request.session[_kept_comment(pk, kind)] = comment
                back = reverse("console:decide", args=[pk, kind])
                return stepup.ask(
                    request,
                    back + ("?break_glass=1" if break_glass else ""),
                    _decision_purpose(pk, kind, break_glass),
                )
            error, status = exc.message, STATUS_FOR_ERROR.get(exc.kind, 400)
        else:
            request.session.pop(_kept_comment(pk, kind), None)
    if not error and not request.htmx:
        verb = "approved" if kind == DecisionKind.APPROVE else "rejected"
        glass = " by breaking the glass: everyone concerned is told" if break_glass else ""
        messages.success(request, f"You {verb} proposal {pk}{glass}.")
        return redirect(next_url(request) or reverse("console:proposal", args=[pk]))
    if status == 404:
        return render(request, "console/404.html", status=404)
    proposal = proposal_for_page(pk)
    context = proposal_context(proposal, request.user, error)
    if request.htmx:
        return render(request, "approvals/detail.html#proposal-panel", context, status=status)
    context.update(
        code_blocks=highlighted(proposal),
        parameters_json=other_parameters(proposal),
        **beside(proposal, request.user),
    )
    return render(request, "approvals/detail.html", context, status=status)


def _decision_purpose(pk: int, kind: str, break_glass: bool = False) -> str:
    proposal = Proposal.objects.only("summary", "action", "risk_score").get(pk=pk)
    verb = "Approve" if kind == DecisionKind.APPROVE else "Reject"
    if break_glass:
        verb = f"Break the glass: {verb.lower()}"
    return (
        f"{verb} proposal {pk}, risk {proposal.risk_score}: {proposal.summary or proposal.action}"
    )


@require_http_methods(["POST"])
@reviewer_required
def break_glass_reviewed(request: HttpRequest, pk: int) -> HttpResponse:
    """Mark a break-glass decision reviewed: it leaves the red list (audited)."""
    try:
        services.mark_break_glass_reviewed(pk, request.user)
    except services.ProposalError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Proposal {pk}'s break-glass decision is marked reviewed.")
    return redirect(next_url(request) or reverse("console:proposal", args=[pk]))


def _kept_comment(pk: int, kind: str) -> str:
    return f"airlock_decision_comment_{pk}_{kind}"


def _confirm_page(request: HttpRequest, pk: int, kind: str) -> HttpResponse:
    proposal = proposal_for_page(pk)
    context = {
        **proposal_context(proposal, request.user),
        "code_blocks": highlighted(proposal),
        "parameters_json": other_parameters(proposal),
        "confirm_kind": kind,
        "confirm_break_glass": request.GET.get("break_glass") == "1",
        # Kept from a try before the step-up, or brought by the API's link (a token's comment).
        "kept_comment": request.session.get(_kept_comment(pk, kind))
        or request.GET.get("comment", "")[:4000],
        "step_up_needed": stepup.needed_for_risk(proposal.risk_score)
        and not stepup.Authentication.of_session(request).fresh(),
        **beside(proposal, request.user),
    }
    return render(request, "approvals/detail.html", context)


def next_url(request: HttpRequest) -> str | None:
    """Where the keyboard's confirm dialog asked to return (the queue), if it is ours."""
    target = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if target and safe else None


# --- history ------------------------------------------------------------------


def history_page(params):
    """One page of every proposal with its execution: a constant number of queries."""
    form = forms.HistoryFilterForm(params)
    queryset = form.apply(
        Proposal.objects.select_related("agent", "execution").order_by("-created_at", "-pk")
    )
    return form, CappedPaginator(queryset, HISTORY_PAGE_SIZE).get_page(params.get("page"))


@reviewer_required
def history(request: HttpRequest) -> HttpResponse:
    form, page = history_page(request.GET)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "agents": Agent.objects.values_list("name", flat=True),
        "actions": forms.action_choices(),
    }
    template = "approvals/history.html"
    if request.htmx and request.htmx.target == "history-results":
        template += "#history-results"
    return render(request, template, context)


# --- overview -----------------------------------------------------------------------


@reviewer_required
def overview_page(request: HttpRequest) -> HttpResponse:
    """Proposals per day by outcome, time to decision, who decides, risk, top agents and actions."""
    form = forms.OverviewForm(request.GET if "days" in request.GET else None)
    view = overview.overview(form.window())
    context = {
        "form": form,
        "view": view,
        "charts": charts.all_charts(view),
        # In red until someone other than the admin who broke the glass marks it reviewed.
        "broken_glass": Proposal.objects.filter(
            break_glass_at__isnull=False, break_glass_reviewed_at__isnull=True
        )
        .select_related("agent")
        .order_by("-break_glass_at")[:20],
    }
    template = "approvals/overview.html"
    if request.htmx and request.htmx.target == "overview":
        template += "#overview"
    return render(request, template, context)
