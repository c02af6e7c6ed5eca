"""Risk the policy gives a tool call (``tool.call``): by the tool's name, and by its arguments.

A rule names tools with a glob. Without ``argument`` it sets the call's base
risk (the first such rule that matches; else the catalog's 4). With
``argument`` it adds a finding when the call's argument of that name holds:
``above`` (a number over it), ``matches`` or ``not_matches`` (a glob over the
text: ``not_matches: "*@acme.com"`` is a recipient outside the company). A
call without the argument does not meet the condition. Findings combine with
the rest as every risk does (``approvals.policy.risk``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from rest_framework import serializers

from approvals.policy.risk.base import Finding

CONDITIONS = ("above", "matches", "not_matches")


@dataclass(frozen=True)
class ToolRisk:
    tool: str
    risk: int
    argument: str = ""
    above: float | None = None
    matches: str = ""
    not_matches: str = ""
    note: str = ""

    @classmethod
    def from_data(cls, data: dict) -> ToolRisk:
        return cls(**{key: value for key, value in data.items() if value not in (None, "")})

    def as_data(self) -> dict:
        data = {"tool": self.tool, "risk": self.risk}
        if self.argument:
            data["argument"] = self.argument
            for condition in CONDITIONS:
                if (value := getattr(self, condition)) not in (None, ""):
                    if isinstance(value, float) and value.is_integer():
                        value = int(value)  # 100, as people write it, not 100.0
                    data[condition] = value
        if self.note:
            data["note"] = self.note
        return data

    def holds(self, arguments: dict) -> bool:
        """Whether a call with ``arguments`` meets this rule's condition (one without any
        condition always does)."""
        if not self.argument:
            return True
        if self.argument not in arguments:
            return False
        value = arguments[self.argument]
        if self.above is not None:
            number = (
                value if isinstance(value, int | float) and not isinstance(value, bool) else None
            )
            if number is None and isinstance(value, str):
                try:
                    number = float(value)
                except ValueError:
                    return False
            return number is not None and number > self.above
        text = value if isinstance(value, str) else str(value)
        if self.matches:
            return fnmatchcase(text, self.matches)
        return not fnmatchcase(text, self.not_matches)

    def reason(self) -> str:
        said = f"policy: tool {self.tool}"
        if self.argument:
            condition = next(c for c in CONDITIONS if getattr(self, c) not in (None, ""))
            value = getattr(self, condition)
            shown = f"{value:g}" if isinstance(value, int | float) else value
            said += f" with {self.argument} {condition.replace('_', ' ')} {shown}"
        said += f" is risk {self.risk}"
        return f"{said} ({self.note})" if self.note else said


class ToolRiskSerializer(serializers.Serializer):
    tool = serializers.CharField(max_length=200, help_text="a glob of tool names")
    risk = serializers.IntegerField(min_value=0, max_value=10)
    argument = serializers.CharField(max_length=100, required=False, default="")
    above = serializers.FloatField(required=False, allow_null=True, default=None)
    matches = serializers.CharField(max_length=500, required=False, default="")
    not_matches = serializers.CharField(max_length=500, required=False, default="")
    note = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")

    def validate(self, data: dict) -> dict:
        given = [c for c in CONDITIONS if data.get(c) not in (None, "")]
        if data.get("argument") and len(given) != 1:
            raise serializers.ValidationError(
                {"argument": ["takes exactly one of above, matches or not_matches"]}
            )
        if not data.get("argument") and given:
            raise serializers.ValidationError(
                {given[0]: ["needs the argument it reads (argument: NAME)"]}
            )
        return ToolRisk.from_data(data).as_data()


def tool_risk(
    rules: tuple[ToolRisk, ...], parameters: dict, base: int
) -> tuple[int, list[Finding]]:
    """The call's base risk (0 when a rule gave it: it is then among the findings) and
    the findings of the rules that apply to it."""
    tool, arguments = str(parameters.get("tool", "")), parameters.get("arguments") or {}
    findings: list[Finding] = []
    based = False
    for rule in rules:
        if fnmatchcase(tool, rule.tool) and rule.holds(arguments):
            if rule.argument or not based:  # a base risk: the first one only
                findings.append(Finding(rule.risk, rule.reason()))
            based = based or not rule.argument
    return (0 if based else base), findings
