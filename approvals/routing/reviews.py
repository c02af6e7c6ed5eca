"""What a routed proposal still needs, who may give it, and for which team an approval counts.

A proposal's route (``Proposal.routing``, fixed when it was made) requires so
many approvals from each of some teams, and ``needed`` approvals in all (never
fewer than the risk quorum). Approvals count per team, by distinct people:
each approval counts for one team only, the first still short that its
reviewer is in (``Decision.team``), so a person in two required teams cannot
satisfy both. Once every team has its count, the approvals still missing
for ``needed`` may come from any member of the route's teams. After an
escalation (``escalation``), members of the ``escalate_to`` teams may give a
silent team's approvals in its place. Whoever may approve may also reject.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from approvals.choices import DecisionKind
from approvals.models import Decision, Proposal
from approvals.routing.document import Team
from approvals.routing.membership import in_any, is_member, members


class NotARequiredReviewer(Exception):
    """The reviewer is in none of the teams whose approvals the proposal still needs."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Standing:
    """Where one routed proposal stands: approvals given per team, who decided."""

    routing: dict
    given: Counter  # team → approvals counted for it ("" for the ones beyond the teams')
    decided: frozenset[str]  # usernames that decided it
    escalated: bool

    @property
    def short(self) -> dict[str, int]:
        """Team → approvals it still owes, in the route's order."""
        return {
            team: n - self.given[team]
            for team, n in self.routing["require"].items()
            if n > self.given[team]
        }

    @property
    def beyond(self) -> int:
        """Approvals still missing once every team has its count (the risk quorum's rest)."""
        return max(self.routing["needed"] - sum(self.given.values()), 0) if not self.short else 0

    def deciding_teams(self) -> list[str]:
        """The teams whose members may decide now."""
        teams = list(self.short) or (list(self.routing["require"]) if self.beyond else [])
        if teams and self.escalated:
            teams += [t for t in self.routing["escalate_to"] if t not in teams]
        return teams


def standing(proposal: Proposal) -> Standing | None:
    """``proposal``'s standing (one query), or None when no route applies to it."""
    if not proposal.routing:
        return None
    rows = Decision.objects.filter(proposal=proposal).values_list(
        "reviewer__username", "kind", "team"
    )
    given, decided = Counter(), set()
    for username, kind, team in rows:
        decided.add(username)
        if kind == DecisionKind.APPROVE:
            given[team] += 1
    return Standing(proposal.routing, given, frozenset(decided), proposal.escalated_at is not None)


def counts_for(proposal: Proposal, user, teams: dict[str, Team]) -> str:
    """The team ``user``'s approval of ``proposal`` counts for ("" when unrouted, or for the
    approvals beyond the teams'); ``NotARequiredReviewer`` when they may not decide it."""
    state = standing(proposal)
    if state is None:
        return ""
    for team in state.short:
        if is_member(user, teams.get(team)):
            return team
    escalated_to = state.routing["escalate_to"] if state.escalated else []
    if state.short and in_any(user, teams, escalated_to):
        return next(iter(state.short))  # in the silent team's place
    if state.beyond and in_any(user, teams, state.deciding_teams()):
        return ""
    raise NotARequiredReviewer(_still_needs(state, teams))


def _still_needs(state: Standing, teams: dict[str, Team]) -> str:
    if not state.short and not state.beyond:
        return "it needs no more approvals"

    def who(team: str) -> str:
        names = [n for n in _deciders(teams.get(team)) if n not in state.decided]
        return f"{team} ({', '.join(names) or 'nobody who may decide'})"

    if state.short:
        parts = [
            f"{n} approval{'s' if n > 1 else ''} from {who(t)}" for t, n in state.short.items()
        ]
        text = "needs " + " and ".join(parts)
    else:
        n = state.beyond
        text = f"needs {n} more approval{'s' if n > 1 else ''} from one of " + ", ".join(
            who(t) for t in state.routing["require"]
        )
    if state.escalated and state.routing["escalate_to"]:
        text += "; escalated to " + ", ".join(who(t) for t in state.routing["escalate_to"])
    return text


def _deciders(team: Team | None) -> list[str]:
    return [] if team is None else list(members(team).values_list("username", flat=True))


class Roster:
    """Who may decide for each team, read once per team (an answer lists many proposals)."""

    def __init__(self, teams: dict[str, Team]):
        self.teams = teams
        self._members: dict[str, list[str]] = {}

    def members(self, team: str) -> list[str]:
        if team not in self._members:
            self._members[team] = _deciders(self.teams.get(team))
        return self._members[team]


def required_reviews(routing: dict | None, decisions: list[dict], roster: Roster) -> list[dict]:
    """Per required team: approvals ``needed`` and ``given``, who gave them, and its
    ``members`` (who may decide for it); what the API and the page show. ``decisions``:
    the proposal's, as dicts with ``kind``, ``team`` and ``reviewer_name``."""
    if not routing:
        return []
    approved_by: dict[str, list[str]] = {}
    for decision in decisions:
        if decision["kind"] == DecisionKind.APPROVE:
            approved_by.setdefault(decision["team"], []).append(decision["reviewer_name"])
    return [
        {
            "team": team,
            "needed": needed,
            "given": len(approved_by.get(team, [])),
            "approved_by": approved_by.get(team, []),
            "members": roster.members(team),
        }
        for team, needed in routing["require"].items()
    ]


def may_decide(proposal: Proposal, user, teams: dict[str, Team]) -> bool:
    """Whether ``user`` is one the route lets decide ``proposal`` now (and has not yet)."""
    state = standing(proposal)
    if state is None:
        return True
    if user.get_username() in state.decided:
        return False
    try:
        counts_for(proposal, user, teams)
    except NotARequiredReviewer:
        return False
    return True


def awaiting(user, teams: dict[str, Team], self_approval: bool) -> list[int]:
    """The pending proposals ``user`` may still decide, by id (two queries and the teams'):
    a routed one whose route lets them decide now, or an unrouted one; never one they
    decided, nor (unless self-approval is on) one of their own agents'."""
    pending = Proposal.objects.pending().filter(expires_at__isnull=False)
    if not self_approval:
        pending = pending.exclude(agent__owner=user)
    rows = list(pending.values_list("pk", "routing", "escalated_at"))
    decisions = Decision.objects.filter(proposal_id__in=[pk for pk, _, _ in rows]).values_list(
        "proposal_id", "reviewer_id", "kind", "team"
    )
    given: dict[int, Counter] = {}
    mine: set[int] = set()
    for pk, reviewer, kind, team in decisions:
        if reviewer == user.pk:
            mine.add(pk)
        if kind == DecisionKind.APPROVE:
            given.setdefault(pk, Counter())[team] += 1
    membership: dict[str, bool] = {}

    def member(team: str) -> bool:
        if team not in membership:
            membership[team] = is_member(user, teams.get(team))
        return membership[team]

    found = []
    for pk, routing, escalated_at in rows:
        if pk in mine:
            continue
        if not routing:
            found.append(pk)
            continue
        state = Standing(routing, given.get(pk, Counter()), frozenset(), escalated_at is not None)
        if any(member(team) for team in state.deciding_teams()):
            found.append(pk)
    return found
