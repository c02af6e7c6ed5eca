"""Where an execution runs and with what: its queue (a host's own for host actions, a
route of its action's), whether it belongs to another host, its sandbox limits."""

from __future__ import annotations

from django.conf import settings

from .actions import get_action
from .actions.host import host_queue
from .models import Execution
from .sandboxes.base import Limits


def queue_for(action: str, parameters: dict | None = None) -> str:
    spec = get_action(action)
    if spec is not None and spec.route is not None:
        routed = spec.route(parameters or {})
        if routed:
            return routed
    if spec is not None and spec.host_bound:
        return host_queue((parameters or {}).get("host"))
    return settings.CELERY_TASK_DEFAULT_QUEUE


def elsewhere(execution: Execution, worker_host: str) -> str | None:
    """The host a host action is for, when that is not ``worker_host``: it must not run here."""
    spec = get_action(execution.action)
    host = execution.parameters.get("host")
    if spec is not None and spec.host_bound and host and host != worker_host:
        return host
    return None


def limits_for(action: str, parameters: dict) -> Limits:
    return Limits(
        timeout_seconds=float(parameters.get("timeout_seconds", 30)),
        memory_mb=int(parameters.get("memory_mb", settings.SCRIPT_MEMORY_MB)),
        network=bool(parameters.get("network", False)),
    )
