"""``script.execute``: code in a language, run in the configured sandbox."""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings
from rest_framework import serializers

from executions.sandboxes import RunRequest, SandboxError, get_sandbox
from executions.sandboxes.base import LANGUAGES, RunOutcome
from infrastructure import tracing
from infrastructure.rest.serializers import Serializer

from .base import ActionContext, ActionSpec, failed

ACTIONS: list[ActionSpec] = []  # this module's part of the catalog, in order

MAX_CODE_CHARS = 100_000


class ScriptParameters(Serializer):
    language = serializers.ChoiceField(choices=LANGUAGES, help_text="The script's language.")
    code = serializers.CharField(
        max_length=MAX_CODE_CHARS, trim_whitespace=False, help_text="The script's source."
    )
    timeout_seconds = serializers.IntegerField(
        min_value=1,
        max_value=300,
        default=30,
        help_text="Wall-clock limit; the run is killed at it.",
    )
    memory_mb = serializers.IntegerField(
        min_value=16, max_value=4096, required=False, help_text="Memory limit of the run."
    )
    network = serializers.BooleanField(
        default=False, help_text="Whether the script needs the network (policy may refuse it)."
    )

    def validate_code(self, value: str) -> str:
        return validate_code(value)


def validate_code(value: str) -> str:
    """What any code parameter must be: non-empty text without NUL bytes."""
    if "\x00" in value:
        raise serializers.ValidationError("code must not contain NUL bytes")
    if not value.strip():
        raise serializers.ValidationError("code is empty")
    return value


def run_script(parameters: dict, context: ActionContext) -> RunOutcome:
    limits = replace(
        context.limits,
        timeout_seconds=float(parameters.get("timeout_seconds", 30)),
        memory_mb=int(parameters.get("memory_mb") or settings.SCRIPT_MEMORY_MB),
        network=bool(parameters.get("network", False)),
    )
    try:
        sandbox = get_sandbox()
        request = RunRequest(
            language=parameters["language"], code=parameters["code"], limits=limits
        )
        with tracing.span("sandbox.run", backend=sandbox.name, language=request.language) as span:
            outcome = sandbox.run(request, context.sink, context.cancel)
            span.set(exit_code=outcome.exit_code, timed_out=outcome.timed_out)
        return outcome
    except SandboxError as exc:
        return failed("none", str(exc), context.sink)


def line_of_code(code: str, line: int | None) -> str:
    """The line the strongest risk reason points at, else the first that is not blank."""
    lines = code.splitlines()
    pointed = lines[line - 1].strip() if line and 0 < line <= len(lines) else ""
    return (pointed or next((text.strip() for text in lines if text.strip()), ""))[:120]


def _summary(parameters: dict, line: int | None = None) -> str:
    return f"{parameters['language']}: {line_of_code(parameters['code'], line)}"


ACTIONS.append(
    ActionSpec(
        name="script.execute",
        sandboxed=True,
        description="Run a Python, Bash or JavaScript script in the sandbox.",
        serializer=ScriptParameters,
        base_risk=2,
        runner=run_script,
        targets={"language": "language"},
        summary=_summary,
    )
)
