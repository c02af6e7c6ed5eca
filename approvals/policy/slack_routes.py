"""Where review requests go in Slack: a channel per risk band, agent and action, first match wins."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from rest_framework import serializers

from approvals.choices import RISK_BANDS, risk_band
from approvals.routing import document as routing


class SlackRouteSerializer(serializers.Serializer):
    """Where review requests go in Slack: a channel, for some risk bands, agents and actions."""

    channel = serializers.RegexField(
        routing.SLACK_CHANNEL, max_length=81, error_messages={"invalid": "a channel id or #name"}
    )
    bands = serializers.ListField(
        child=serializers.ChoiceField(choices=list(RISK_BANDS)), default=list, max_length=3
    )
    agent = serializers.CharField(max_length=200, default="*")
    action = serializers.CharField(max_length=200, default="*")

    def validate_bands(self, bands: list[str]) -> list[str]:
        # One order whatever was typed: export → apply → export must give the same text.
        return [band for band in RISK_BANDS if band in bands]


@dataclass(frozen=True)
class SlackRoute:
    """Review requests matching the bands (none = any) and both globs go to ``channel``."""

    channel: str
    bands: tuple[str, ...] = ()
    agent: str = "*"
    action: str = "*"

    @classmethod
    def from_data(cls, data: dict) -> SlackRoute:
        return cls(
            channel=data["channel"],
            bands=tuple(data.get("bands", ())),
            agent=data.get("agent", "*"),
            action=data.get("action", "*"),
        )

    def matches(self, agent: str, action: str, risk_score: int) -> bool:
        return (
            (not self.bands or risk_band(risk_score) in self.bands)
            and fnmatchcase(agent, self.agent)
            and fnmatchcase(action, self.action)
        )

    def label(self) -> str:
        bands = "+".join(self.bands) or "any risk"
        return f"{self.channel} ← {bands}, agent {self.agent}, action {self.action}"
