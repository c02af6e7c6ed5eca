"""The scorer interface, the result type and the rule that combines findings.

A scorer looks at one proposal and returns *findings*: a number of points
(0-10) and a sentence a reviewer can read. ``combine`` turns the findings and
the action's base risk into one score; see ``approvals.policy.risk`` for the rule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

MIN_SCORE = 0
MAX_SCORE = 10
# How the analysers word a module loaded (Python's imports, JavaScript's loads).
IMPORTING = ("imports ", "loads ")


def clamp(points: int) -> int:
    return max(MIN_SCORE, min(MAX_SCORE, int(points)))


@dataclass(frozen=True)
class Finding:
    """One reason to worry, worth ``points`` (0-10) on its own; ``line``: the line of the
    code it was found on, where the analyser knows it (1-based)."""

    points: int
    reason: str
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", clamp(self.points))


@dataclass(frozen=True)
class RiskAssessment:
    """A proposal's risk: the score 0-10 and the reasons behind it, strongest first."""

    score: int
    reasons: list[str] = field(default_factory=list)
    findings: tuple[Finding, ...] = field(default=(), repr=False, compare=False)
    # reason -> the lines of the code it was found on (the reasons that have any).
    lines: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"score": self.score, "reasons": list(self.reasons)}

    def located(self) -> list[dict[str, Any]] | None:
        """``[{"reason", "lines"}]``, strongest first, for the reasons found on known lines."""
        found = [{"reason": r, "lines": self.lines[r]} for r in self.reasons if r in self.lines]
        return found or None

    def pointed_line(self) -> int | None:
        """The first line the strongest located reason points at (a script's summary): of
        one that does something rather than one that imports a module, which says little of
        a script (``import os`` leads to ``os.listdir`` as well as to ``os.remove``)."""
        located = [r for r in self.reasons if r in self.lines]
        doing = [r for r in located if not r.startswith(IMPORTING)]
        return self.lines[(doing or located)[0]][0] if located else None


class RiskScorer(ABC):
    """Looks at one kind of proposal and says what is risky about it.

    Scorers must not raise for odd input (missing or mistyped parameters,
    code that does not parse); they return findings that say so instead.
    """

    @abstractmethod
    def findings(self, action: str, parameters: Mapping[str, Any]) -> list[Finding]:
        """Findings for this proposal; an empty list when the scorer has nothing to say."""


def located(findings: list[Finding], since: int, line: int | None) -> None:
    """Put ``line`` on the findings appended to ``findings`` after index ``since`` (what one
    node of the code gave: a nested analysis's own lines give way to the node's)."""
    if line is None:
        return
    for index in range(since, len(findings)):
        findings[index] = replace(findings[index], line=line)


def lines_of(findings: Iterable[Finding]) -> dict[str, list[int]]:
    """Reason -> the sorted lines it was found on."""
    found: dict[str, set[int]] = {}
    for finding in findings:
        if finding.line is not None and finding.points > 0:
            found.setdefault(finding.reason, set()).add(finding.line)
    return {reason: sorted(lines) for reason, lines in found.items()}


def distinct(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per reason (the strongest), strongest first.

    The same reason found twice (say, ``os.system`` called in two places) counts once.
    """
    best: dict[str, Finding] = {}
    for finding in findings:
        kept = best.get(finding.reason)
        if kept is None or finding.points > kept.points:
            best[finding.reason] = finding
    return sorted(best.values(), key=lambda f: (-f.points, f.reason))


def combine(findings: Iterable[Finding]) -> int:
    """The strongest finding counts in full, each further one half (rounded up); 0-10."""
    ordered = distinct(findings)
    if not ordered:
        return MIN_SCORE
    top, *rest = ordered
    return clamp(top.points + sum((f.points + 1) // 2 for f in rest))
