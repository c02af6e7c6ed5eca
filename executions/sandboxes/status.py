"""The sandbox in force, as /healthz, /api/v1/capabilities and the console show it."""

from __future__ import annotations

import threading
import time

from django.conf import settings

from . import probe_all, resolve_backend_name

CACHE_SECONDS = 30
_cache: dict = {}
_lock = threading.Lock()

WEAK_WARNING = (
    "weak isolation: scripts run as plain subprocesses with resource limits only "
    "(no namespaces, no Landlock), and policy alone approves none of them; "
    "install bubblewrap, allow unprivileged user namespaces, or use the docker backend"
)


def sandbox_status(refresh: bool = False) -> dict:
    with _lock:
        if not refresh and _cache and time.monotonic() - _cache["at"] < CACHE_SECONDS:
            return _cache["status"]
    probes = probe_all()
    backend = resolve_backend_name()
    availability = probes.get(backend)
    status = {
        "configured": settings.SANDBOX_BACKEND,
        "backend": backend,
        "ok": bool(availability and availability.ok),
        "isolation": availability.isolation if availability else "none",
        "reason": availability.reason if availability else "unknown backend",
        "available": {
            name: {"ok": a.ok, "isolation": a.isolation, "reason": a.reason}
            for name, a in probes.items()
        },
        "warning": "",
    }
    if not status["ok"]:
        status["warning"] = f"sandbox backend {backend!r} is not usable: {status['reason']}"
    elif status["isolation"] == "weak":
        status["warning"] = WEAK_WARNING
    with _lock:
        _cache.update(at=time.monotonic(), status=status)
    return status


def weak_isolation() -> str | None:
    """Why the sandbox in force isolates code weakly, or None when it does not."""
    status = sandbox_status()
    if status["ok"] and status["isolation"] == "weak":
        return f"{status['backend']}: no namespaces, no Landlock; see /healthz"
    return None
