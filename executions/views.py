"""Console pages for executions: the live terminal with its status panel, and cancel."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts.access import reviewer_required
from audit.services import actor_label

from . import services
from .models import Execution

# The page without JavaScript shows at most this much output.
NOSCRIPT_CHARS = 200_000


def execution_for_page(pk: int) -> Execution:
    return get_object_or_404(Execution.objects.select_related("proposal__agent"), pk=pk)


def status_context(execution: Execution, error: str = "") -> dict:
    proposal = getattr(execution, "proposal", None)
    return {"execution": execution, "proposal": proposal, "error": error}


@reviewer_required
def execution_detail(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        execution = execution_for_page(pk)
    except Http404:  # left with its proposal: its output may be in the archive
        archived = f"manage.py retention --output {pk}" if settings.RETENTION_PROPOSAL_DAYS else ""
        return render(request, "console/404.html", {"archived": archived}, status=404)
    output = "".join(execution.chunks.order_by("seq").values_list("data", flat=True)[:2000])[
        :NOSCRIPT_CHARS
    ]
    context = {**status_context(execution), "plain_output": output}
    return render(request, "executions/detail.html", context)


@reviewer_required
def execution_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The status panel alone: the terminal script refreshes it on every status message."""
    execution = execution_for_page(pk)
    return render(request, "executions/detail.html#execution-status", status_context(execution))


@require_POST
@reviewer_required
def cancel(request: HttpRequest, pk: int) -> HttpResponse:
    execution = get_object_or_404(Execution, pk=pk)
    error, status = "", 200
    try:
        services.request_cancel(execution.pk, actor_label(request.user))
    except services.ExecutionConflict as exc:
        error, status = str(exc), 409
    if request.htmx:
        execution = execution_for_page(pk)
        return render(
            request,
            "executions/detail.html#execution-status",
            status_context(execution, error),
            status=status,
        )
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Cancel requested for execution {pk}.")
    return redirect("console:execution", pk=pk)
