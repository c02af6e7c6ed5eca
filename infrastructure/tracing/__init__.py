"""Traces with OpenTelemetry: off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` names a receiver.

Owns the set-up and the span helpers every app calls. ``configure(service)``
runs once per process (the web processes ``airlock-web``, the worker
``airlock-worker``, the MCP bridge ``airlock-mcp-stdio``): a resource naming
the service, a batch processor, the OTLP/HTTP exporter, flushed when the
process exits (``otel``). ``span`` opens a span, ``server_span`` wraps a view
in one that continues the caller's W3C ``traceparent``, ``traceparent`` says
the current span's context.

Off (the variable unset, or a process that never configured), nothing of
OpenTelemetry is imported here and every helper answers ``OFF``, one shared
span that does nothing: a span on the proposal's path costs a function call.
A ``parent`` given as a function is not even called then.

A trace outlives a process: the caller keeps a ``traceparent`` (a proposal's,
on its row) and later spans start as its children with ``parent=``, in
whichever process and however many hours later. Attributes are named
``airlock.<name>``; what a span carries is ids, names and states, never
parameters, code, output or credentials.

Imports Django's settings and OpenTelemetry only, nothing of Airlock's apps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

CURRENT = object()  # ``parent``: the span current in this thread (the default)
_live: Any = None  # infrastructure.tracing.otel once this process configured it


class Off:
    """What the helpers answer while tracing is off: a span that records nothing."""

    traceparent = ""

    def __enter__(self) -> Off:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def set(self, **attributes) -> None:
        """Attributes ``airlock.<name>`` (None values left out)."""

    def event(self, name: str, at: datetime | None = None, **attributes) -> None:
        """An event at ``at`` (now by default) with attributes ``airlock.<name>``."""


OFF = Off()


def configure(service: str) -> None:
    """Send this process's spans as ``service`` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set;
    nothing otherwise. Once per process: a second call changes nothing."""
    global _live
    if _live is not None or not settings.TRACES_ENDPOINT:
        return
    try:
        from infrastructure.tracing import otel
    except ImportError as exc:
        raise ImproperlyConfigured(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
            f"pip install 'airlock[tracing]' ({exc})"
        ) from exc
    otel.start(service)
    _live = otel


def enabled() -> bool:
    """Whether this process sends spans (for work done only to fill one)."""
    return _live is not None


def span(
    name: str,
    *,
    parent: str | Callable[[], str | None] | None | object = CURRENT,
    start: datetime | None = None,
    **attributes: Any,
) -> Any:
    """A span ``name`` to use with ``with``: it yields something with ``set``, ``event`` and
    ``traceparent``, and records an exception that leaves it.

    ``parent``: the current span (the default), or a W3C ``traceparent`` (or a function
    returning one, called only when tracing is on): that context's child, a new trace when
    it is empty or not valid. ``start``: when it began, if before now.
    """
    if _live is None:
        return OFF
    if callable(parent):
        parent = parent() or ""
    return _live.span(name, None if parent is CURRENT else parent or "", start, attributes)


def traceparent() -> str:
    """The current span's W3C ``traceparent``; "" when there is none or tracing is off."""
    return "" if _live is None else _live.traceparent()


def server_span(name: str) -> Callable:
    """Decorate a view method: its request is a server span ``name`` (``POST /api/v1/…``),
    the child of the caller's ``traceparent`` header when it holds a valid one."""

    def decorate(view: Callable) -> Callable:
        @functools.wraps(view)
        def traced(self, request, *args, **kwargs):
            if _live is None:
                return view(self, request, *args, **kwargs)
            return _live.serve(name, request, lambda: view(self, request, *args, **kwargs))

        return traced

    return decorate
