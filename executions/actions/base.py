"""The action catalog's shape: each action has a parameter schema, a base risk,
the policy targets it touches, and a runner that carries it out.

A runner takes validated parameters and an ``ActionContext`` (output sink,
cancel event, limits) and returns a ``RunOutcome``; it writes what it produces
to the sink as it goes and never raises for an expected failure (unknown
container, unreachable engine): it returns ``exit_code`` 1 and ``error``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rest_framework import serializers

from executions.sandboxes.base import Limits, OutputSink, RunOutcome
from infrastructure.rest.serializers import refuse_unknown


@dataclass
class ActionContext:
    """What a runner gets besides its parameters."""

    sink: OutputSink
    cancel: threading.Event = field(default_factory=threading.Event)
    limits: Limits = field(default_factory=Limits)
    execution_id: int | None = None


Runner = Callable[[dict, ActionContext], RunOutcome]


@dataclass(frozen=True)
class ActionSpec:
    """One entry of the catalog."""

    name: str
    description: str
    serializer: type[serializers.Serializer]
    base_risk: int  # 0-10, before any analysis of the parameters
    runner: Runner
    read_only: bool = False
    host_bound: bool = False  # carried out by the worker on the host it acts on
    sandboxed: bool = False  # runs code the agent wrote, in the sandbox in force
    reported: bool = False  # carried out by the proposing agent, which reports the outcome
    # Policy targets: kind -> parameter name, e.g. {"container": "container"}.
    targets: dict[str, str] = field(default_factory=dict)
    # One line saying what the proposal does; given the line of the code its strongest risk
    # reason points at, when it has code and one is known.
    summary: Callable[[dict, int | None], str] | None = None
    # The Celery queue for these parameters when it depends on them (a session's worker).
    route: Callable[[dict], str | None] | None = None
    # Whether the proposer (its audit label) may name what the parameters name (a
    # session is its owner's alone): raises serializers.ValidationError if not.
    authorize: Callable[[dict, str], None] | None = None

    def validate(self, parameters: object) -> dict:
        """Validated parameters, or ``serializers.ValidationError``."""
        if not isinstance(parameters, dict):
            raise serializers.ValidationError({"parameters": ["must be a JSON object"]})
        serializer = self.serializer(data=parameters)
        serializer.is_valid(raise_exception=True)
        refuse_unknown(parameters, serializer, "unknown parameter")
        return dict(serializer.validated_data)

    def primary_target(self, parameters: dict) -> str | None:
        """The value of the action's first target (what a scoped capability names)."""
        return next(iter(self.target_values(parameters).values()), None)

    def shown_targets(self, parameters: dict) -> dict[str, str]:
        """What the proposal acts on, for a reviewer (a container, a host and service, a
        tool); a script's language is no target (it runs in the sandbox)."""
        return {k: v for k, v in self.target_values(parameters).items() if k != "language"}

    def target_values(self, parameters: dict) -> dict[str, str]:
        return {
            kind: str(parameters[param])
            for kind, param in self.targets.items()
            if parameters.get(param) not in (None, "")
        }

    def describe(self, parameters: dict, line: int | None = None) -> str:
        if self.summary is not None:
            return self.summary(parameters, line)
        values = ", ".join(f"{k}={v}" for k, v in self.target_values(parameters).items())
        return f"{self.name}({values})" if values else self.name


def failed(
    backend: str, message: str, sink: OutputSink | None = None, started: float | None = None
) -> RunOutcome:
    """The outcome of an action that could not be carried out, with a clear message."""
    import time

    if sink is not None:
        sink.write("stderr", (message.rstrip("\n") + "\n").encode())
    duration = int((time.monotonic() - started) * 1000) if started is not None else 0
    return RunOutcome(exit_code=1, duration_ms=duration, backend=backend, error=message)
