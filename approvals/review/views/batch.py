"""Deciding several proposals at once from the queue: the rows selected, one comment, one
step-up for the lot (``approvals.core.batch`` decides each by its own rules)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from accounts import stepup
from accounts.access import reviewer_required
from approvals.choices import DecisionKind
from approvals.core import services
from approvals.core.batch import MAX_IDS, decide_many
from approvals.models import Proposal
from approvals.review.views.proposals import next_url

VERBS = {DecisionKind.APPROVE: ("Approve", "approved"), DecisionKind.REJECT: ("Reject", "rejected")}


def parse_ids(values: list[str]) -> list[int] | None:
    """Ids from form fields (``ids=4&ids=5``) or one comma-separated field; None if any is
    not a proposal id or there are too many."""
    ids: list[int] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if not (part.isascii() and part.isdigit()) or not 0 < int(part) < 2**63:
                return None
            ids.append(int(part))
    ids = list(dict.fromkeys(ids))
    return ids if len(ids) <= MAX_IDS else None


@require_http_methods(["GET", "POST"])
@reviewer_required
def decide_many_page(request: HttpRequest, kind: str) -> HttpResponse:
    """GET: the selected proposals and the decision, to confirm (where a step-up, a mail or
    the API's ``url`` sends the reviewer). POST: decide them and go back to the queue."""
    if kind not in VERBS:
        return render(request, "console/404.html", status=404)
    source = request.POST if request.method == "POST" else request.GET
    ids = parse_ids(source.getlist("ids"))
    comment = source.get("comment", "")[:4000]
    if not ids:
        messages.error(
            request,
            "Select the proposals to decide."
            if ids is not None
            else f"Those are not proposal ids, or more than {MAX_IDS} of them.",
        )
        return redirect("console:queue")
    proposals = list(
        Proposal.objects.filter(pk__in=ids).select_related("agent").order_by("-risk_score", "pk")
    )
    if request.method == "GET":
        return _confirm(request, kind, ids, proposals, comment)
    how = stepup.Authentication.of_session(request)
    if not how.fresh() and any(
        p.is_pending and stepup.needed_for_risk(p.risk_score) for p in proposals
    ):
        back = reverse("console:decide-many", args=[kind]) + "?" + _query(ids, comment)
        return stepup.ask(request, back, _purpose(kind, proposals))
    results = decide_many(ids, request.user, kind, comment, authentication=how)
    _tell(request, kind, results)
    return redirect(next_url(request) or reverse("console:queue"))


def _confirm(request, kind: str, ids: list[int], proposals: list[Proposal], comment: str):
    found = {p.pk for p in proposals}
    rows = [
        {
            "proposal": p,
            "why_not": services.why_not(request.user, p) if p.is_pending else "",
            "needs_step_up": p.is_pending and stepup.needed_for_risk(p.risk_score),
        }
        for p in proposals
    ]
    context = {
        "kind": kind,
        "verb": VERBS[kind][0],
        "rows": rows,
        "missing": [pk for pk in ids if pk not in found],
        "comment": comment,
        "ids": ",".join(str(pk) for pk in ids),
        "step_up": any(row["needs_step_up"] for row in rows)
        and not stepup.Authentication.of_session(request).fresh(),
    }
    return render(request, "approvals/decide_many.html", context)


def _tell(request, kind: str, results: list[dict]) -> None:
    done = [r for r in results if "status" in r]
    refused = [r for r in results if "error" in r]
    if done:
        listed = ", ".join(f"#{r['id']}" for r in done)
        waiting = sum(r["status"] == "pending" for r in done)
        more = f" ({waiting} still need more approvals)" if waiting else ""
        messages.success(request, f"You {VERBS[kind][1]} {len(done)} proposal(s): {listed}{more}.")
    for result in refused:
        messages.error(request, f"#{result['id']} not decided: {result['error']['message']}")


def _purpose(kind: str, proposals: list[Proposal]) -> str:
    pending = [p for p in proposals if p.is_pending]
    highest = max((p.risk_score for p in pending), default=0)
    listed = ", ".join(f"#{p.pk}" for p in pending[:10]) + ("…" if len(pending) > 10 else "")
    return f"{VERBS[kind][0]} {len(pending)} proposals (highest risk {highest}): {listed}"


def _query(ids: list[int], comment: str) -> str:
    query = {"ids": ",".join(str(pk) for pk in ids)}
    if comment:
        query["comment"] = comment
    return urlencode(query)
