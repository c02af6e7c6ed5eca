"""The console shell's own pages (users' review rights, the audit trail) and error pages.

The proposal and execution pages live with their apps (``approvals.review.views``,
``executions.views``); ``console_urls`` mounts them all under one namespace.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.access import admin_required
from accounts.roles import REVIEWERS_GROUP, set_review_rights
from accounts.stepup import fresh_factor_required
from approvals.core import tokens
from audit.models import AuditEvent, ChainArchive, Checkpoint
from audit.services import (
    ChainReport,
    actor_label,
    chain_end,
    verify_chain,
    verify_chain_after,
)
from infrastructure.rest.errors import json_error

AUDIT_PAGE_SIZE = 50


@admin_required
def users(request: HttpRequest) -> HttpResponse:
    people = get_user_model().objects.order_by("username").prefetch_related("groups")
    rows = [
        (person, any(g.name == REVIEWERS_GROUP for g in person.groups.all())) for person in people
    ]
    return render(request, "console/users.html", {"rows": rows})


@require_POST
@admin_required
@fresh_factor_required(
    then=lambda request, pk: reverse("console:users"), purpose="Change someone's review rights"
)
def set_reviewer(request: HttpRequest, pk: int) -> HttpResponse:
    person = get_object_or_404(get_user_model(), pk=pk)
    allowed = request.POST.get("reviewer") == "on"
    set_review_rights(person, allowed, actor_label(request.user))
    verb = "can now review" if allowed else "can no longer review"
    messages.success(request, f"{person.get_username()} {verb}.")
    return redirect("console:users")


@require_POST
@admin_required
@fresh_factor_required(
    then=lambda request, pk: reverse("console:users"),
    purpose="Sign someone out everywhere and revoke their tokens",
)
def end_access(request: HttpRequest, pk: int) -> HttpResponse:
    """Sign a person out everywhere and revoke their personal tokens, at once."""
    person = get_object_or_404(get_user_model(), pk=pk)
    ended = tokens.end_access(person, actor_label(request.user))
    messages.success(
        request,
        f"{person.get_username()}: {ended['sessions']} session(s) ended, "
        f"{ended['tokens']} token(s) revoked.",
    )
    return redirect("console:users")


@admin_required
def audit_trail(request: HttpRequest) -> HttpResponse:
    through = ChainArchive.objects.first()
    after = through.through_seq if through else 0
    events = AuditEvent.objects.filter(seq__gt=after).order_by("-seq")
    page = _ChainPaginator(events, AUDIT_PAGE_SIZE, rows=chain_end()[0] - after)
    page = page.get_page(request.GET.get("page"))
    passes = AuditEvent.objects.filter(verb="retention.archived").order_by("-seq")
    last = {
        "output": passes.filter(data__kind__isnull=True).first(),  # the output's name no kind
        "proposals": passes.filter(data__kind="proposals").first(),
    }
    retention = {
        "days": settings.RETENTION_DAYS,
        "proposal_days": settings.RETENTION_PROPOSAL_DAYS,
        "audit_days": settings.RETENTION_AUDIT_DAYS,
        "archive": settings.RETENTION_ARCHIVE,
        "last": last,
        "through": through,
    }
    chain, whole_at = chain_status()
    context = {
        "page": page,
        "chain": chain,
        "whole_at": whole_at,
        "retention": retention,
        "checkpoint": Checkpoint.objects.order_by("-pk").first(),
    }
    return render(request, "console/audit.html", context)


class _ChainPaginator(Paginator):
    """Pages of the chain, counted from its numbers (contiguous, and verified on this very
    page) instead of ``COUNT(*)``, which read every row: a tenth of the page at 10⁶."""

    def __init__(self, object_list, per_page, rows: int):
        super().__init__(object_list, per_page)
        self.rows = max(rows, 0)

    @property
    def count(self) -> int:
        return self.rows


CHAIN_KEY = "audit:chain-verified"
FULL_CHECK_SECONDS = 3600


def chain_status() -> tuple[ChainReport, datetime]:
    """The chain's state for the audit page, and when the whole of it was last verified:
    at most an hour ago (in any process, through the shared cache), the rows added since
    on each view. At a million rows a whole check takes seconds; ``manage.py verify_audit``
    always does it.
    """
    known = cache.get(CHAIN_KEY)
    report = None
    if known and time.time() - known["at"] < FULL_CHECK_SECONDS:
        since = verify_chain_after(known["seq"], known["hash"])
        if since.ok:  # else the whole chain says where (a restored database, or a change)
            report = ChainReport(True, known["checked"] + since.checked)
    if report is None:
        report = verify_chain()
        known = {"at": time.time(), "checked": 0}
    if report.ok:
        seq, hash = chain_end()
        cache.set(CHAIN_KEY, {**known, "seq": seq, "hash": hash, "checked": report.checked})
    else:
        cache.delete(CHAIN_KEY)
    return report, datetime.fromtimestamp(known["at"], tz=UTC)


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return json_error(404, "not_found", f"no such endpoint: {request.path}")
    return render(request, "console/404.html", status=404)


def server_error(request):
    if request.path.startswith("/api/"):
        return json_error(500, "server_error", "internal error; it has been logged")
    return render(request, "console/500.html", status=500)
