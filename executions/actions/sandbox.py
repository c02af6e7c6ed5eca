"""``sandbox.execute``: a snippet in a persistent session, routed to the session's worker."""

from __future__ import annotations

from rest_framework import serializers

from executions import sessions
from executions.models import SandboxSession
from executions.sandboxes.base import RunOutcome
from infrastructure import tracing
from infrastructure.rest.serializers import Serializer

from .base import ActionContext, ActionSpec, failed
from .scripts import MAX_CODE_CHARS, line_of_code, validate_code

ACTIONS: list[ActionSpec] = []  # this module's part of the catalog, in order


class SessionExecuteParameters(Serializer):
    session_id = serializers.IntegerField(
        min_value=1, help_text="The sandbox session to run in (sandbox.create made it)."
    )
    code = serializers.CharField(
        max_length=MAX_CODE_CHARS,
        trim_whitespace=False,
        help_text="Python run in the session; variables and imports persist between executes.",
    )
    timeout_seconds = serializers.IntegerField(
        min_value=1, max_value=300, default=30, help_text="Wall-clock limit of this execute."
    )
    language = serializers.ChoiceField(choices=["python"], default="python")

    def validate_code(self, value: str) -> str:
        return validate_code(value)


def _route(parameters: dict) -> str | None:
    """The queue of the worker process holding the session; any worker once it ended.

    (Any worker then fails the execute: "sandbox session N is not active".)
    """
    return (
        SandboxSession.objects.filter(
            pk=parameters.get("session_id"), status=SandboxSession.Status.ACTIVE
        )
        .values_list("queue", flat=True)
        .first()
    )


def _owned_by_proposer(parameters: dict, proposer: str) -> None:
    """A session takes executes from the agent that made it and no other."""
    if not SandboxSession.objects.filter(pk=parameters["session_id"], owner=proposer).exists():
        raise serializers.ValidationError(
            {
                "session_id": [
                    f"sandbox session {parameters['session_id']} does not exist or is not yours"
                ]
            }
        )


def run_in_session(parameters: dict, context: ActionContext) -> RunOutcome:
    limits = context.limits
    try:
        with tracing.span("sandbox.run", session_id=parameters["session_id"]) as span:
            outcome = sessions.execute(
                parameters["session_id"], parameters["code"], context.sink, context.cancel, limits
            )
            span.set(backend=outcome.backend, exit_code=outcome.exit_code)
        return outcome
    except sessions.SessionUnavailable as exc:
        return failed("session", str(exc), context.sink)


ACTIONS.append(
    ActionSpec(
        name="sandbox.execute",
        sandboxed=True,
        description="Run Python in a persistent sandbox session (state survives between executes).",
        serializer=SessionExecuteParameters,
        base_risk=2,
        runner=run_in_session,
        targets={"language": "language"},
        route=_route,
        authorize=_owned_by_proposer,
        summary=lambda p, line=None: f"session {p['session_id']}: {line_of_code(p['code'], line)}",
    )
)
