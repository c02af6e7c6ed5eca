"""The scorer interface, the result type and the rule that combines findings.

A scorer looks at one proposal and returns *findings*: a number of points
(0-10) and a sentence a reviewer can read. ``combine`` turns the findings and
the action's base risk into one score; see ``approvals.policy.risk`` for the rule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MIN_SCORE = 0
MAX_SCORE = 10


def clamp(points: int) -> int:
    return max(MIN_SCORE, min(MAX_SCORE, int(points)))


@dataclass(frozen=True)
class Finding:
    """One reason to worry, worth ``points`` (0-10) on its own."""

    points: int
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", clamp(self.points))


@dataclass(frozen=True)
class RiskAssessment:
    """A proposal's risk: the score 0-10 and the reasons behind it, strongest first."""

    score: int
    reasons: list[str] = field(default_factory=list)
    findings: tuple[Finding, ...] = field(default=(), repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"score": self.score, "reasons": list(self.reasons)}


class RiskScorer(ABC):
    """Looks at one kind of proposal and says what is risky about it.

    Scorers must not raise for odd input (missing or mistyped parameters,
    code that does not parse); they return findings that say so instead.
    """

    @abstractmethod
    def findings(self, action: str, parameters: Mapping[str, Any]) -> list[Finding]:
        """Findings for this proposal; an empty list when the scorer has nothing to say."""


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
