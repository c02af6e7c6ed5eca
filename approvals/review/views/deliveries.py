"""The admins' delivery log: every channel's messages, sent, failed with the reason, retried;
and how far each audit sink has been sent the audit trail."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.core.paginator import Paginator
from django.db.models import CharField, F, Value
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.access import admin_required
from approvals.notify.models import Delivery, WebhookDelivery
from approvals.review import forms
from audit.shipping.ship import lags

DELIVERY_PAGE_SIZE = 50
DELIVERY_COLUMNS = (
    "id",
    "channel",
    "operation",
    "event",
    "proposal_id",
    "target",
    "state",
    "attempts",
    "error",
    "next_attempt_at",
    "created_at",
    "delivered_at",
)


def delivery_log(filters: dict):
    """Webhook, mail and Slack deliveries, newest first, as one list of dicts."""
    webhooks = WebhookDelivery.objects.annotate(
        channel=Value("webhook", CharField()),
        operation=Value("post", CharField()),
        target=F("webhook__name"),
    )
    others = Delivery.objects.all()
    if "state" in filters:
        webhooks = webhooks.filter(state=filters["state"])
        others = others.filter(state=filters["state"])
    channel = filters.get("channel")
    if channel == "webhook":
        others = others.none()
    elif channel:
        webhooks, others = webhooks.none(), others.filter(channel=channel)
    parts = [queryset.values(*DELIVERY_COLUMNS).order_by() for queryset in (webhooks, others)]
    return parts[0].union(parts[1], all=True).order_by("-created_at", "-id")


@admin_required
def deliveries(request: HttpRequest) -> HttpResponse:
    """Every channel's delivery log: sent, failed with the reason, retried."""
    form = forms.DeliveryFilterForm(request.GET)
    rows = delivery_log(form.values())
    page = Paginator(rows, DELIVERY_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    try:
        context["sinks"] = lags()
    except ImproperlyConfigured as error:
        context["sinks_error"] = str(error)
    return render(request, "approvals/deliveries.html", context)
