"""The sandbox in force, as /healthz, /api/v1/capabilities and the console show it."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings

from . import probe_all, resolve_backend_name

log = logging.getLogger(__name__)

CACHE_SECONDS = 30
_last: tuple[float, dict] | None = None  # (monotonic time, status) of the latest probe
_probing = threading.Lock()  # one probe at a time per process

WEAK_WARNING = (
    "weak isolation: scripts run as plain subprocesses with resource limits only "
    "(no namespaces, no Landlock), and policy alone approves none of them; "
    "install bubblewrap, allow unprivileged user namespaces, or use the docker backend"
)


def sandbox_status(refresh: bool = False) -> dict:
    """The sandbox in force and every backend's availability, probed at most every 30 s.

    Probing runs the backends' checks (tens of milliseconds; the first in a
    process also copies what a run sees of /etc). Only the first call in a
    process, or one with ``refresh``, waits for a probe; once the answer is
    older than ``CACHE_SECONDS`` callers get it at once while one thread
    probes again behind them, so no request pays for a probe and concurrent
    callers never probe side by side.
    """
    last = _last
    if not refresh and last is not None:
        if time.monotonic() - last[0] >= CACHE_SECONDS and _probing.acquire(blocking=False):
            threading.Thread(target=_probe_and_release, name="sandbox-probe", daemon=True).start()
        return last[1]
    with _probing:
        if not refresh and _last is not None:
            return _last[1]  # probed by the caller this one waited for
        return _probe()


def _probe_and_release() -> None:
    try:
        _probe()
    except Exception:  # the last answer stays; the next caller after CACHE_SECONDS tries again
        log.exception("probing the sandbox backends failed")
    finally:
        _probing.release()


def _probe() -> dict:
    global _last
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
    _last = (time.monotonic(), status)
    return status


def weak_isolation() -> str | None:
    """Why the sandbox in force isolates code weakly, or None when it does not."""
    status = sandbox_status()
    if status["ok"] and status["isolation"] == "weak":
        return f"{status['backend']}: no namespaces, no Landlock; see /healthz"
    return None
