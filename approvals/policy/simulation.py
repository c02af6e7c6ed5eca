"""Dry-run a draft policy against recent history, before anyone saves it.

Each of the last N proposals is replayed through the cascade
(``policy.replay``) with the risk score and targets it had, and where the draft
would route it (run on policy, review with a quorum, denied) is compared with
where policy routed it then. The pre-validator is never called: a verdict
recorded at the time is reused, and a proposal without one is scored without.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import F
from django.db.models.fields.json import KT

from approvals.choices import ProposalStatus
from approvals.models import Proposal
from approvals.policy.rules import (
    APPROVED_STEPS,
    DENIED_STEPS,
    Outcome,
    Policy,
    current_policy,
    replay,
)
from executions.actions import catalog, get_action
from executions.sandboxes import status

DEFAULT_LAST = 1000
MAX_LAST = 10_000  # the console and the API; the command takes any number
EXAMPLES = 5
APPROVED, REVIEW, DENIED = "approved", "review", "denied"
ROUTE_ORDER = {APPROVED: 0, REVIEW: 1, DENIED: 2}


@dataclass(frozen=True, order=True)
class Route:
    """Where policy sends a proposal: run at once, to people (with their quorum), or away."""

    kind: str
    quorum: int = 0

    @property
    def label(self) -> str:
        if self.kind == REVIEW:
            return f"review ({self.quorum} approval{'s' if self.quorum != 1 else ''})"
        return "auto-approved" if self.kind == APPROVED else "denied"

    @property
    def rank(self) -> tuple[int, int]:
        return ROUTE_ORDER[self.kind], self.quorum


def route_of(outcome: Outcome) -> Route:
    if outcome.status == ProposalStatus.APPROVED:
        return Route(APPROVED)
    if outcome.status == ProposalStatus.DENIED:
        return Route(DENIED)
    return Route(REVIEW, outcome.required_approvals)


def recorded_route(row: dict) -> Route:
    """Where policy routed a stored proposal, whatever reviewers did with it afterwards."""
    step = row["decision_path"].get("step") if isinstance(row["decision_path"], dict) else None
    if step in APPROVED_STEPS:
        return Route(APPROVED)
    if step in DENIED_STEPS or (step is None and row["status"] == ProposalStatus.DENIED):
        return Route(DENIED)
    if step is None and row["status"] == ProposalStatus.APPROVED and not row["approvals_count"]:
        return Route(APPROVED)
    return Route(REVIEW, row["required_approvals"])


@dataclass
class Example:
    id: int
    agent: str
    action: str
    summary: str
    risk_score: int
    status: str  # what became of it
    reason: str  # why the draft routes it where it does


@dataclass
class Move:
    """Proposals that one route would send elsewhere under the draft."""

    before: Route
    after: Route
    count: int = 0
    rejected: int = 0  # of them, reviewers rejected: the draft would have run these
    by_draft: int = 0  # of them, the policy in force would not move: the draft's own doing
    examples: list[Example] = field(default_factory=list)

    @property
    def more(self) -> int:
        return self.count - len(self.examples)


@dataclass
class Preview:
    considered: int
    moved: int
    by_draft: int  # moves the policy in force would not make (history decided by older versions)
    moves: list[Move]
    before: dict[str, int]  # route label → proposals
    after: dict[str, int]
    routes: list[str]  # labels, in display order
    oldest: datetime | None
    newest: datetime | None
    unknown_actions: int  # proposals of actions no longer in the catalog, left out
    # The draft's review routes (approvals.routing): what each would have taken of what
    # goes to people, with the teams it requires; and what goes to people by no route.
    review_routes: list[dict] = field(default_factory=list)
    unrouted: int = 0

    def totals(self) -> list[tuple[str, int, int, int]]:
        """(route, as decided, with the draft, change) for each route either side uses."""
        return [
            (label, self.before[label], self.after[label], self.after[label] - self.before[label])
            for label in self.routes
        ]

    def as_dict(self) -> dict:
        return {
            "considered": self.considered,
            "moved": self.moved,
            "moved_by_draft": self.by_draft,
            "oldest": self.oldest,
            "newest": self.newest,
            "unknown_actions": self.unknown_actions,
            "totals": [
                {"route": label, "before": self.before[label], "after": self.after[label]}
                for label in self.routes
            ],
            "review_routes": self.review_routes,
            "unused_review_routes": [r["route"] for r in self.review_routes if not r["count"]],
            "unrouted": self.unrouted,
            "moves": [
                {
                    "from": move.before.label,
                    "to": move.after.label,
                    "count": move.count,
                    "by_draft": move.by_draft,
                    "rejected_by_reviewers": move.rejected,
                    "examples": [example.__dict__ for example in move.examples],
                }
                for move in self.moves
            ],
        }


def _target_parameters() -> list[str]:
    """Every parameter some action takes its policy targets from, and the network flag."""
    names = {param for spec in catalog().values() for param in spec.targets.values()}
    return sorted(names | {"network"})


def recent_rows(last: int) -> list[dict]:
    """The last ``last`` proposals with what a replay needs; never their code (it can be large)."""
    params = {f"param_{name}": KT(f"parameters__{name}") for name in _target_parameters()}
    return list(
        Proposal.objects.order_by("-created_at", "-pk").values(
            "id",
            "action",
            "summary",
            "status",
            "risk_score",
            "decision_path",
            "required_approvals",
            "approvals_count",
            "created_at",
            agent_name=F("agent__name"),
            **params,
        )[:last]
    )


def _parameters(row: dict) -> dict:
    return {
        key.removeprefix("param_"): value
        for key, value in row.items()
        if key.startswith("param_") and value is not None
    }


def _flag(value: object) -> bool:
    # A JSON boolean read through a key transform is 1/0 on SQLite, 'true'/'false' on PostgreSQL.
    return value in (True, 1, "1", "true", "True")


def replay_row(policy: Policy, row: dict, weak_now: str | None) -> Outcome | None:
    """What ``policy`` decides for a stored proposal row (``recent_rows``); None if unknown action."""
    spec = get_action(row["action"])
    if spec is None:
        return None
    parameters = _parameters(row)
    path = row["decision_path"] if isinstance(row["decision_path"], dict) else {}
    return replay(
        policy,
        agent_name=row["agent_name"],
        action=spec.name,
        targets=spec.target_values(parameters),
        risk_score=row["risk_score"],
        decision_path=path,
        wants_network=_flag(parameters.get("network")),
        sandboxed=spec.sandboxed,
        weak_sandbox_now=weak_now,
    )


def simulate(draft: dict, last: int = DEFAULT_LAST) -> Preview:
    """How the last ``last`` proposals would move under the policy document ``draft``.

    A move is measured against where the proposal was routed when it came in.
    Where history was decided by an older version, the policy in force may
    move some of it too; ``by_draft`` counts the moves the draft alone makes.
    """
    policy, in_force = Policy.from_data(0, draft), current_policy()
    rows = recent_rows(last)
    weak_now = status.weak_isolation()  # the sandbox in force, as decisions see it
    moves: dict[tuple[Route, Route], Move] = {}
    before: Counter = Counter()
    after: Counter = Counter()
    unknown = 0
    routed = {route.number: _review_route(route) for route in policy.reviews}
    unrouted = 0
    for row in rows:
        outcome = replay_row(policy, row, weak_now)
        if outcome is None:
            unknown += 1
            continue
        if outcome.status == ProposalStatus.PENDING:
            unrouted += not _count_review_route(policy, routed, row, outcome)
        was, will = recorded_route(row), route_of(outcome)
        before[was] += 1
        after[will] += 1
        if was != will:
            move = moves.setdefault((was, will), Move(was, will))
            by_draft = route_of(replay_row(in_force, row, weak_now)) != will
            _count_move(move, row, outcome, by_draft)
    routes = sorted(set(before) | set(after), key=lambda route: route.rank)
    ordered = sorted(moves.values(), key=lambda m: (-m.count, m.before.rank, m.after.rank))
    return Preview(
        considered=len(rows) - unknown,
        moved=sum(move.count for move in ordered),
        by_draft=sum(move.by_draft for move in ordered),
        moves=ordered,
        before={route.label: before[route] for route in routes},
        after={route.label: after[route] for route in routes},
        routes=[route.label for route in routes],
        oldest=rows[-1]["created_at"] if rows else None,
        newest=rows[0]["created_at"] if rows else None,
        unknown_actions=unknown,
        review_routes=list(routed.values()),
        unrouted=unrouted,
    )


def _review_route(route) -> dict:
    return {
        "route": route.label(),
        "require": dict(route.require),
        "count": 0,
        "needed": {},  # approvals in all (the quorum may ask for more than require) → proposals
        "examples": [],
    }


def _count_review_route(policy: Policy, routed: dict, row: dict, outcome: Outcome) -> bool:
    """Count a proposal the draft sends to people under the route it would match; False
    when none does."""
    spec = get_action(row["action"])
    targets = spec.target_values(_parameters(row))
    route = policy.route_for(row["action"], row["agent_name"], targets, row["risk_score"])
    if route is None:
        return False
    shown = routed[route.number]
    shown["count"] += 1
    needed = str(max(sum(n for _, n in route.require), outcome.required_approvals))
    shown["needed"][needed] = shown["needed"].get(needed, 0) + 1
    if len(shown["examples"]) < EXAMPLES:
        shown["examples"].append({"id": row["id"], "summary": row["summary"]})
    return True


def _count_move(move: Move, row: dict, outcome: Outcome, by_draft: bool) -> None:
    move.count += 1
    move.by_draft += by_draft
    move.rejected += row["status"] == ProposalStatus.REJECTED
    if len(move.examples) < EXAMPLES:
        move.examples.append(
            Example(
                id=row["id"],
                agent=row["agent_name"],
                action=row["action"],
                summary=row["summary"],
                risk_score=row["risk_score"],
                status=row["status"],
                reason=outcome.reason,
            )
        )
