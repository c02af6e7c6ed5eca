"""The policy's ``teams`` and ``reviews``: what they may say, and what they become.

::

    teams:
      dba: {members: [alice, bob], sso_groups: [db-admins], slack_channel: "#dba"}
      sre: {sso_groups: [sre]}
    reviews:
      - match: ["action:host.*", "host:db-*"]     # all must hold; kind:glob
        risk_at_least: 5                          # optional
        require: {dba: 1, sre: 1}                 # approvals per team
        escalate_after_minutes: 15                # optional, with escalate_to
        escalate_to: [sre]

A route's ``require`` replaces the risk quorum but never asks for fewer
approvals than the quorum for the proposal's risk: the rest may come from any
member of the route's teams.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from rest_framework import serializers

# The same kinds as the allow/deny/notify lists, and the agent's name.
MATCH_KINDS = (
    "action", "agent", "command", "service", "container", "process", "language", "host", "tool",
)  # fmt: skip
TEAM_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
# A Slack channel id (C…, G…) or a channel name as people type it (#ops-approvals).
SLACK_CHANNEL = re.compile(r"^(#[a-z0-9][a-z0-9._-]{0,79}|[CG][A-Z0-9]{2,20})$")


class TeamSerializer(serializers.Serializer):
    members = serializers.ListField(
        child=serializers.CharField(max_length=150), default=list, max_length=1000
    )
    sso_groups = serializers.ListField(  # kept as Django groups "idp:<name>": 150 at most
        child=serializers.CharField(max_length=146), default=list, max_length=100
    )
    slack_channel = serializers.RegexField(
        SLACK_CHANNEL,
        max_length=81,
        required=False,
        allow_blank=True,
        default="",
        error_messages={"invalid": "a channel id or #name"},
    )
    email = serializers.EmailField(required=False, allow_blank=True, default="")

    def validate(self, data: dict) -> dict:
        if not data["members"] and not data["sso_groups"]:
            raise serializers.ValidationError(
                "a team needs members or sso_groups: as it stands nobody could approve for it"
            )
        return data


class RouteSerializer(serializers.Serializer):
    match = serializers.ListField(
        child=serializers.CharField(max_length=300), min_length=1, max_length=20
    )
    risk_at_least = serializers.IntegerField(
        min_value=0, max_value=10, required=False, allow_null=True, default=None
    )
    require = serializers.DictField(
        child=serializers.IntegerField(min_value=1, max_value=10), allow_empty=False
    )
    escalate_after_minutes = serializers.IntegerField(
        min_value=1, max_value=10080, required=False, allow_null=True, default=None
    )
    escalate_to = serializers.ListField(
        child=serializers.CharField(max_length=40), default=list, max_length=10
    )

    def validate_match(self, items: list[str]) -> list[str]:
        for item in items:
            kind, colon, glob = item.partition(":")
            if not colon or not glob:
                raise serializers.ValidationError(
                    f"{item!r} is not kind:glob (e.g. action:docker.*)"
                )
            if kind not in MATCH_KINDS:
                raise serializers.ValidationError(
                    f"unknown match kind {kind!r} in {item!r} (known: {', '.join(MATCH_KINDS)})"
                )
        return items

    def validate(self, data: dict) -> dict:
        if bool(data["escalate_after_minutes"]) != bool(data["escalate_to"]):
            raise serializers.ValidationError(
                {"escalate_to": "escalate_after_minutes and escalate_to go together"}
            )
        return data


def team_problems(teams: dict) -> dict:
    """Errors of the team names themselves (their fields are the serializer's)."""
    bad = [name for name in teams if not TEAM_NAME.match(str(name))]
    return {
        name: ["a team name: lowercase letters, digits, '-' and '_', at most 40"] for name in bad
    }


def route_problems(teams: dict, routes: list[dict]) -> list[dict]:
    """Per route, the teams it names that the document does not define (``[]`` when none)."""
    known = ", ".join(sorted(teams)) or "none defined"
    problems = []
    for route in routes:
        found: dict = {}
        unknown = [t for t in route["require"] if t not in teams]
        if unknown:
            found["require"] = {t: [f"unknown team {t!r} (teams: {known})"] for t in unknown}
        elsewhere = [t for t in route["escalate_to"] if t not in teams]
        if elsewhere:
            found["escalate_to"] = [f"unknown team {t!r} (teams: {known})" for t in elsewhere]
        problems.append(found)
    return problems if any(problems) else []


@dataclass(frozen=True)
class Team:
    """People who decide together: by username, and by the identity provider's groups."""

    name: str
    members: tuple[str, ...] = ()
    sso_groups: tuple[str, ...] = ()
    slack_channel: str = ""
    email: str = ""

    @classmethod
    def from_data(cls, name: str, data: dict) -> Team:
        return cls(
            name=name,
            members=tuple(data.get("members", ())),
            sso_groups=tuple(data.get("sso_groups", ())),
            slack_channel=data.get("slack_channel", ""),
            email=data.get("email", ""),
        )

    def as_data(self) -> dict:
        return {
            "members": list(self.members),
            "sso_groups": list(self.sso_groups),
            "slack_channel": self.slack_channel,
            "email": self.email,
        }


@dataclass(frozen=True)
class Route:
    """Proposals that match every ``kind:glob`` (and the risk) need ``require``'s approvals."""

    number: int  # its place in ``reviews``, from 1
    match: tuple[str, ...]
    require: tuple[tuple[str, int], ...]
    risk_at_least: int | None = None
    escalate_after_minutes: int | None = None
    escalate_to: tuple[str, ...] = ()

    @classmethod
    def from_data(cls, number: int, data: dict) -> Route:
        return cls(
            number=number,
            match=tuple(data["match"]),
            require=tuple(data["require"].items()),
            risk_at_least=data.get("risk_at_least"),
            escalate_after_minutes=data.get("escalate_after_minutes"),
            escalate_to=tuple(data.get("escalate_to", ())),
        )

    def as_data(self) -> dict:
        return {
            "match": list(self.match),
            "risk_at_least": self.risk_at_least,
            "require": dict(self.require),
            "escalate_after_minutes": self.escalate_after_minutes,
            "escalate_to": list(self.escalate_to),
        }

    def matches(self, action: str, agent: str, targets: dict[str, str], risk: int) -> bool:
        if self.risk_at_least is not None and risk < self.risk_at_least:
            return False
        values = {**targets, "action": action, "agent": agent}
        for item in self.match:
            kind, _, glob = item.partition(":")
            value = values.get(kind)
            if value is None or not fnmatchcase(str(value), glob):
                return False
        return True

    def label(self) -> str:
        risk = f", risk ≥ {self.risk_at_least}" if self.risk_at_least is not None else ""
        return f"reviews[{self.number}]: {' '.join(self.match)}{risk}"

    def snapshot(self, quorum: int) -> dict:
        """What a proposal keeps of its route (``Proposal.routing``), fixed when it is made."""
        return {
            "route": self.number,
            "label": self.label(),
            "require": dict(self.require),
            "needed": max(sum(n for _, n in self.require), quorum),
            "escalate_after_minutes": self.escalate_after_minutes,
            "escalate_to": list(self.escalate_to),
        }


def first_route(
    routes: tuple[Route, ...], action: str, agent: str, targets: dict[str, str], risk: int
) -> Route | None:
    return next((r for r in routes if r.matches(action, agent, targets, risk)), None)
