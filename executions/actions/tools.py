"""``tool.call``: a call of one of the agent's own tools, approved here and carried out there.

Airlock does not run it: once the call is approved, the proposing agent makes
it and reports how it went (``POST /api/v1/executions/{id}/report``) before a
deadline (``TOOL_REPORT_SECONDS``), after which the execution is ``lost``.
Policy reads the tool's name as the target ``tool`` (``tool:github.*``); a
capability may name tools too (``tool.call:github.*``).
"""

from __future__ import annotations

import json
import re

from rest_framework import serializers

from executions.sandboxes.base import RunOutcome
from infrastructure.rest.serializers import Serializer

from .base import ActionContext, ActionSpec, failed

ACTIONS: list[ActionSpec] = []  # this module's part of the catalog, in order

MAX_ARGUMENTS_BYTES = 64 * 1024
TOOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"
TOOL_NAME_MAX = 200
_tool_name = re.compile(TOOL_NAME)


def is_tool_name(name: str) -> bool:
    """Whether ``name`` is one a ``tool.call`` takes (what the parameters' check accepts)."""
    return len(name) <= TOOL_NAME_MAX and _tool_name.match(name) is not None


class ToolName(serializers.RegexField):
    """A tool's name, as text: a number or a list is refused, not turned into one."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_text")
        return super().to_internal_value(data)


class ToolCallParameters(Serializer):
    tool = ToolName(
        TOOL_NAME,
        max_length=TOOL_NAME_MAX,
        help_text="The tool's name, e.g. `github.merge_pull_request` (letters, digits, `_.:/-`).",
        error_messages={
            "invalid": "must be a tool name: letters, digits and _ . : / -",
            "not_text": "must be a tool name as a string",
        },
    )
    arguments = serializers.JSONField(
        default=dict, help_text="The call's arguments, a JSON object (shown to reviewers)."
    )

    def validate_arguments(self, value: object) -> dict:
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object")
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > MAX_ARGUMENTS_BYTES:
            raise serializers.ValidationError(
                f"must be at most {MAX_ARGUMENTS_BYTES} bytes as JSON ({size} given)"
            )
        return value


def _not_run_here(parameters: dict, context: ActionContext) -> RunOutcome:
    """A worker never carries out a tool call; should one be dispatched, it fails clearly."""
    return failed("agent", "tool.call is carried out by the agent that proposed it", context.sink)


def _summary(parameters: dict, line: int | None = None) -> str:
    shown = ", ".join(
        f"{name}={json.dumps(value, ensure_ascii=False)}"
        for name, value in parameters.get("arguments", {}).items()
    )
    if len(shown) > 120:
        shown = shown[:119] + "…"
    return f"{parameters['tool']}({shown})"


ACTIONS.append(
    ActionSpec(
        name="tool.call",
        description=(
            "Ask to call one of the agent's own tools; once approved the agent makes the call "
            "and reports the outcome (POST /api/v1/executions/{id}/report)."
        ),
        serializer=ToolCallParameters,
        base_risk=4,
        runner=_not_run_here,
        reported=True,
        targets={"tool": "tool"},
        summary=_summary,
    )
)
