"""Risk scoring: every proposal gets a score 0-10 and the reasons behind it.

Entry points::

    assess(action, parameters, base_risk) -> RiskAssessment
    score_code(language, code) -> RiskAssessment

Scorers (``RiskScorer`` subclasses) each return *findings*, a number of points
and a sentence. The scorers in use are the dotted paths in the setting
``RISK_SCORERS``; the default is ``DEFAULT_RISK_SCORERS``.

How findings become one score
-----------------------------
The action's base risk (from the catalog) counts as one more finding. Findings
with the same reason count once. Then, strongest first::

    score = strongest + sum(ceil(points / 2) for every other finding)

clamped to 0-10. So the worst thing found sets the floor and each further
thing found raises the score by half its weight. The rule is monotone: adding
a finding, or raising one, never lowers the score.

Static analysis is a risk signal, never the security boundary (the sandbox
is). Code that cannot be parsed, or that hides what it does, scores higher,
never lower; a scorer that fails counts as a finding too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from approvals.moved import import_class
from approvals.policy.risk.analysis import LANGUAGES, analyse_code
from approvals.policy.risk.base import (
    MAX_SCORE,
    Finding,
    RiskAssessment,
    RiskScorer,
    clamp,
    combine,
    distinct,
    lines_of,
)

__all__ = [
    "DEFAULT_RISK_SCORERS",
    "LANGUAGES",
    "Finding",
    "RiskAssessment",
    "RiskScorer",
    "assess",
    "combine",
    "get_scorers",
    "score_code",
    "top_reasons",
]

logger = logging.getLogger(__name__)

DEFAULT_RISK_SCORERS = (
    "approvals.policy.risk.scorers.ActionRulesScorer",
    "approvals.policy.risk.scorers.HostCommandScorer",
    "approvals.policy.risk.scorers.CodeScorer",
    "approvals.policy.risk.control_plane.ControlPlaneScorer",
)


def assess(
    action: str, parameters: dict, base_risk: int, found: tuple[Finding, ...] | list = ()
) -> RiskAssessment:
    """Score one proposal: its action's base risk plus what every scorer finds, and the
    findings ``found`` before (the policy's, for a tool call)."""
    action = str(action)
    if not isinstance(parameters, Mapping):
        parameters = {}
    findings: list[Finding] = list(found)
    base = clamp(base_risk) if isinstance(base_risk, int) else MAX_SCORE // 2
    if base:
        findings.append(Finding(base, _base_reason(action, base)))
    for path, scorer in get_scorers():
        findings.extend(_run_scorer(path, scorer, action, parameters))
    return _assessment(findings)


def _base_reason(action: str, base: int) -> str:
    return f"{action} starts at risk {base}"


def top_reasons(action: str, reasons: list, count: int = 2) -> list[str]:
    """The ``count`` strongest reasons that say something of this proposal (not its
    action's base risk, which every proposal of the action shares): what a queue row shows."""
    base = _base_reason(action, 0)[: -len("0")]
    return [str(r) for r in reasons if not str(r).startswith(base)][:count]


def score_code(language: str, code: str) -> RiskAssessment:
    """Score code alone, as it would count inside a script proposal (no base risk)."""
    return _assessment(analyse_code(language, code))


def get_scorers() -> list[tuple[str, RiskScorer]]:
    """The configured scorers, instantiated once per distinct setting."""
    paths = DEFAULT_RISK_SCORERS
    if settings.configured:
        paths = tuple(getattr(settings, "RISK_SCORERS", DEFAULT_RISK_SCORERS))
    return _load_scorers(paths)


@lru_cache(maxsize=8)
def _load_scorers(paths: tuple[str, ...]) -> list[tuple[str, RiskScorer]]:
    try:
        return [(path, import_class(path)()) for path in paths]
    except ImportError as exc:
        raise ImproperlyConfigured(f"RISK_SCORERS: {exc}") from exc


def _run_scorer(
    path: str, scorer: RiskScorer, action: str, parameters: Mapping[str, Any]
) -> list[Finding]:
    try:
        found = list(scorer.findings(action, parameters))
        if not all(isinstance(f, Finding) for f in found):
            raise TypeError("a scorer must return Finding objects")
        return found
    except Exception:  # a broken scorer must not let a proposal through unexamined
        logger.exception("risk scorer %s failed on %s", path, action)
        return [Finding(6, f"a risk check failed ({path.rsplit('.', 1)[-1]}); treated as risky")]


def _assessment(findings: Any) -> RiskAssessment:
    findings = list(findings)
    ordered = distinct(findings)
    reasons = [f.reason for f in ordered if f.points > 0]
    return RiskAssessment(
        score=combine(ordered), reasons=reasons, findings=tuple(ordered), lines=lines_of(findings)
    )
