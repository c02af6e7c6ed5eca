"""/livez, /healthz and /metrics: what an operator's probes and Prometheus read."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Count, Min
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily

from approvals.choices import ProposalStatus
from approvals.models import Agent, Proposal
from audit.shipping.ship import lags
from executions.choices import ExecutionStatus
from executions.models import Execution
from executions.sandboxes.status import sandbox_status
from infrastructure.rest.errors import error_body


def livez(request):
    """The process answers: a load balancer's liveness probe (no database, no sandbox).

    Nothing here but Django's request cycle, so it is also the floor the API
    benchmark measures reads against.
    """
    return JsonResponse({"status": "alive"})


def healthz(request):
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = {"ok": True, "vendor": connection.vendor}
    except Exception as exc:
        checks["database"] = {"ok": False, "error": str(exc)}
    sandbox = sandbox_status()
    checks["sandbox"] = sandbox
    ok = checks["database"]["ok"] and sandbox["ok"]
    body = {
        "status": "ok" if ok else "degraded",
        "checks": checks,
        "warnings": [w for w in [sandbox["warning"]] if w],
    }
    return JsonResponse(body, status=200 if ok else 503)


class DatabaseCollector:
    """Gauges read from the database at scrape time: right across every process."""

    def collect(self):
        proposals = GaugeMetricFamily("airlock_proposals", "Proposals by status", labels=["status"])
        counts = dict(Proposal.objects.values_list("status").annotate(n=Count("id")))
        for status in ProposalStatus.values:
            proposals.add_metric([status], counts.get(status, 0))
        yield proposals
        executions = GaugeMetricFamily(
            "airlock_executions", "Executions by status", labels=["status"]
        )
        counts = dict(Execution.objects.values_list("status").annotate(n=Count("id")))
        for status in ExecutionStatus.values:
            executions.add_metric([status], counts.get(status, 0))
        yield executions
        oldest = Proposal.objects.pending().aggregate(oldest=Min("created_at"))["oldest"]
        age = (timezone.now() - oldest).total_seconds() if oldest else 0
        yield GaugeMetricFamily(
            "airlock_oldest_pending_seconds", "Age of the oldest pending proposal", value=age
        )
        behind = GaugeMetricFamily(
            "airlock_audit_sink_behind_records",
            "Audit records a sink has not acknowledged yet",
            labels=["sink"],
        )
        waited = GaugeMetricFamily(
            "airlock_audit_sink_lag_seconds",
            "Age of the oldest audit record a sink has not acknowledged (0: none)",
            labels=["sink"],
        )
        try:
            found = lags()
        except ImproperlyConfigured:  # said by the checks at start-up, and on the console
            found = []
        for lag in found:
            behind.add_metric([lag.name], lag.behind)
            waited.add_metric([lag.name], lag.seconds)
        yield behind
        yield waited
        yield from agent_metrics()
        sandbox = sandbox_status()
        yield GaugeMetricFamily(
            "airlock_sandbox_ok", "Whether the sandbox in force works", value=int(sandbox["ok"])
        )


def agent_metrics():
    """Proposals refused by each agent's limits (approvals.guard), and the agents paused."""
    refused = CounterMetricFamily(
        "airlock_proposals_refused",
        "Proposals refused by an agent's limits or pause, by agent and reason",
        labels=["agent", "reason"],
    )
    paused = 0
    for agent in Agent.objects.order_by("name").only(
        "name", "paused_at", "refused_paused", "refused_pending", "refused_rate"
    ):
        paused += agent.paused_at is not None
        for reason, count in (
            ("agent_paused", agent.refused_paused),
            ("too_many_pending", agent.refused_pending),
            ("rate_limited", agent.refused_rate),
        ):
            if count:
                refused.add_metric([agent.name, reason], count)
    yield refused
    yield GaugeMetricFamily("airlock_agents_paused", "Agents paused", value=paused)


_registry = CollectorRegistry()
_registry.register(DatabaseCollector())


def metrics(request):
    """Prometheus text; behind a bearer token when ``METRICS_TOKEN`` is set."""
    if settings.METRICS_TOKEN:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), settings.METRICS_TOKEN.encode()
        ):
            response = JsonResponse(
                error_body(
                    "not_authenticated", "/metrics needs Authorization: Bearer <METRICS_TOKEN>"
                ),
                status=401,
            )
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
    return HttpResponse(generate_latest(_registry), content_type=CONTENT_TYPE_LATEST)
