"""What runs once tracing is on: this process's tracer provider and the spans it makes.

Imported only by ``infrastructure.tracing.configure``, when an endpoint is set. The
provider is the global one, so the MCP SDK's own spans (a ``tools/call`` and the
``_meta`` context its caller sent) join the same traces. Spans leave in batches
(``OTEL_BSP_*``) over OTLP/HTTP (``OTEL_EXPORTER_OTLP_*``: the SDK reads them), and the
provider flushes what is left when the process exits.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_w3c = TraceContextTextMapPropagator()
_tracer: trace.Tracer = trace.NoOpTracer()


def start(service: str) -> None:
    """This process's provider: spans of ``service``, batched, exported over OTLP/HTTP."""
    global _tracer
    resource = Resource.create(
        {
            "service.name": service,
            "service.namespace": "airlock",
            "service.instance.id": f"{socket.gethostname()}:{os.getpid()}",
        }
    )
    provider = TracerProvider(resource=resource)  # shut down (flushed) at exit
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer("airlock")


class Span:
    """One recording span, as the helpers hand it out (``infrastructure.tracing.Off``'s calls)."""

    __slots__ = ("_span",)

    def __init__(self, span: trace.Span):
        self._span = span

    def set(self, **attributes) -> None:
        self._span.set_attributes(_named(attributes))

    def event(self, name: str, at: datetime | None = None, **attributes) -> None:
        self._span.add_event(name, _named(attributes), timestamp=_nanoseconds(at))

    @property
    def traceparent(self) -> str:
        return _traceparent(trace.set_span_in_context(self._span))


@contextmanager
def span(name: str, parent: str | None, start: datetime | None, attributes: dict) -> Iterator[Span]:
    """A span, current inside the block; ``parent`` None: the current span's child."""
    context = None if parent is None else _context_of(parent)
    with _tracer.start_as_current_span(
        name, context=context, attributes=_named(attributes), start_time=_nanoseconds(start)
    ) as made:
        yield Span(made)


def serve(name: str, request, answer: Callable[[], Any]) -> Any:
    """``answer()`` (a view's response) inside a server span continuing the caller's trace."""
    attributes = {"http.request.method": request.method, "url.path": request.path}
    with _tracer.start_as_current_span(
        name,
        context=_context_of(request.headers.get("traceparent", "")),
        kind=SpanKind.SERVER,
        attributes=attributes,
        set_status_on_exception=False,  # a refusal (4xx) is the caller's error, not ours
    ) as made:
        try:
            response = answer()
        except Exception as exc:
            _answered(made, getattr(exc, "status_code", 500))
            raise
        _answered(made, response.status_code)
        return response


def traceparent() -> str:
    return _traceparent(None)


def _answered(made: trace.Span, status: int) -> None:
    made.set_attribute("http.response.status_code", status)
    if status >= 500:
        made.set_status(StatusCode.ERROR)


def _context_of(traceparent: str) -> Context:
    """The context a ``traceparent`` names; an empty one (a new trace) when it is not valid."""
    return _w3c.extract({"traceparent": traceparent}, context=Context())


def _traceparent(context: Context | None) -> str:
    carrier: dict[str, str] = {}
    _w3c.inject(carrier, context=context)
    return carrier.get("traceparent", "")


def _named(attributes: dict) -> dict:
    """``airlock.<name>`` for each attribute that has a value; anything but a plain number,
    boolean or string (a choice, a date) is sent as its text."""
    return {
        f"airlock.{name}": value if type(value) in (bool, int, float, str) else str(value)
        for name, value in attributes.items()
        if value is not None
    }


def _nanoseconds(at: datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1_000_000_000)
