"""The containers Docker actions may act on: ``DOCKER_ACTION_CONTAINERS``.

A comma-separated list of rules; a container matches when one rule does:

- ``*``: any container (the embedded default: the operator's own engine);
- ``label:KEY`` or ``label:KEY=VALUE``: a container carrying that label;
- ``name:PATTERN``: a container whose name matches the glob (``web-*``).

Airlock's own sandbox containers never match, whatever the rules say.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

# The label every Airlock sandbox carries (``executions.sandboxes.reaper.LABEL``, written
# again because the gate imports nothing of Airlock; tests/dockergate holds them equal).
SANDBOX_LABEL = "airlock.sandbox"


class BadRules(ValueError):
    """The rules do not parse; the message says which one and why."""


@dataclass(frozen=True)
class Rule:
    kind: str  # "any", "label" or "name"
    key: str = ""
    value: str | None = None

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        if self.kind == "any":
            return True
        if self.kind == "name":
            return fnmatch.fnmatchcase(name, self.key)
        return self.key in labels and (self.value is None or labels[self.key] == self.value)

    def __str__(self) -> str:
        if self.kind == "any":
            return "*"
        if self.kind == "name":
            return f"name:{self.key}"
        return f"label:{self.key}" + ("" if self.value is None else f"={self.value}")


@dataclass(frozen=True)
class Targets:
    """A parsed ``DOCKER_ACTION_CONTAINERS``."""

    rules: tuple[Rule, ...]

    @classmethod
    def parse(cls, text: str) -> Targets:
        rules = []
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                continue
            if item == "*":
                rules.append(Rule("any"))
                continue
            kind, sep, rest = item.partition(":")
            if not sep or kind not in ("label", "name") or not rest:
                raise BadRules(
                    f"{item!r} is not a rule: use '*', 'label:KEY', 'label:KEY=VALUE' or 'name:PATTERN'"
                )
            if kind == "name":
                rules.append(Rule("name", rest))
            else:
                key, eq, value = rest.partition("=")
                if not key:
                    raise BadRules(f"{item!r} names no label")
                rules.append(Rule("label", key, value if eq else None))
        return cls(tuple(rules))

    def allows(self, name: str, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        if SANDBOX_LABEL in labels:
            return False
        name = name.removeprefix("/")
        return any(rule.matches(name, labels) for rule in self.rules)

    def describe(self) -> str:
        if not self.rules:
            return "no container (DOCKER_ACTION_CONTAINERS is empty)"
        return "containers matching " + ", ".join(str(rule) for rule in self.rules)
