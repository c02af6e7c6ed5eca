"""An execution's spans in its proposal's trace: the worker's run, the agent's report.

An execution is made long after its proposal and run in another process, so the trace it
belongs to is read from its row's proposal (``trace_parent``, the context the proposal
was made in), and only while tracing is on: off, a traced service costs one call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from infrastructure import tracing

from .models import Execution

F = TypeVar("F", bound=Callable)


def traced(name: str) -> Callable[[F], F]:
    """Decorate a service whose first argument is an execution's id: each call is a span
    ``name`` in the proposal's trace, and the execution it returns (None: it did nothing)
    says how it ended."""

    def decorate(service: F) -> F:
        @functools.wraps(service)
        def call(execution_id: int, *args, **kwargs):
            if not tracing.enabled():
                return service(execution_id, *args, **kwargs)
            parent = functools.partial(trace_parent, execution_id)
            with tracing.span(name, parent=parent, execution_id=execution_id) as span:
                execution = service(execution_id, *args, **kwargs)
                span.set(**ended(execution))
            return execution

        return call  # type: ignore[return-value]

    return decorate


def trace_parent(execution_id: int) -> str | None:
    """The W3C context the execution's proposal was made in, if one was kept."""
    rows = Execution.objects.filter(pk=execution_id).values_list("proposal__trace_parent")
    return next(iter(rows), (None,))[0]


def ended(execution: Execution | None) -> dict:
    if execution is None:
        return {"status": "not taken"}  # another worker's, or no longer waiting
    return {"action": execution.action, "status": execution.status, "backend": execution.backend}
