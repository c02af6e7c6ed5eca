"""The overview: what happened to proposals over a window of days, from each day's tally.

A day's tally (counts by outcome, risk score, agent and action, and the
times people took to decide) is counted by a few grouped queries, one per
figure for all the days counted at once, and kept (``OverviewDay``) once the
day has settled, so a view counts only today and the days that still have a
proposal waiting: the page costs about the same at a thousand or a million
proposals a year. The outcome counts read the ``proposal_outcomes`` index alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from urllib.parse import urlencode

from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    Q,
    Value,
)
from django.db.models import When as W
from django.urls import reverse
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.models import Agent, Proposal
from approvals.review.models import OverviewDay

WINDOWS = (7, 14, 30, 90)
DEFAULT_WINDOW = 14
TOP = 8
OLDEST_WAITING = 6

# Outcome key → (label, the history filter that lists exactly those proposals).
OUTCOMES = {
    "auto": ("approved by policy", {"status": "approved", "decided_by": "policy"}),
    "approved": ("approved by reviewers", {"status": "approved", "decided_by": "people"}),
    "pending": ("waiting", {"status": "pending"}),
    "denied": ("denied by policy", {"status": "denied"}),
    "rejected": ("rejected by reviewers", {"status": "rejected"}),
    "expired": ("expired unreviewed", {"status": "expired"}),
    "withdrawn": ("withdrawn by the agent", {"status": "withdrawn"}),
}
BY_POLICY = ("auto", "denied")
BY_PEOPLE = ("approved", "rejected")
# The proposals a person decided: what "time to decision" measures.
DECIDED_BY_PEOPLE = Q(status=ProposalStatus.APPROVED, approvals_count__gt=0) | Q(
    status=ProposalStatus.REJECTED
)
DECIDED_BY_POLICY = Q(status=ProposalStatus.DENIED) | Q(
    status=ProposalStatus.APPROVED, approvals_count=0
)


def outcome_expression() -> Case:
    return Case(
        W(status=ProposalStatus.APPROVED, approvals_count=0, then=Value("auto")),
        W(status=ProposalStatus.APPROVED, then=Value("approved")),
        default=F("status"),
        output_field=CharField(),
    )


@dataclass
class Overview:
    """The figures of one window; ``charts`` draws them."""

    days: int
    first_day: date
    last_day: date
    per_day: dict[date, dict[str, int]]
    totals: dict[str, int]
    p50: timedelta | None
    p95: timedelta | None
    risk: dict[int, int]
    top_agents: list[tuple[str, int]]
    top_actions: list[tuple[str, int]]
    oldest_waiting: list[Proposal] = field(default_factory=list)
    # Time to a reviewer's decision: day -> (decided, p50, p95), newest first; and per team
    # of the review routes (a routed proposal counts for each team it required).
    waits_per_day: list[tuple[date, int, timedelta, timedelta]] = field(default_factory=list)
    waits_per_team: list[tuple[str, int, timedelta, timedelta]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    @property
    def by_policy(self) -> int:
        return sum(self.totals[key] for key in BY_POLICY)

    @property
    def by_people(self) -> int:
        return sum(self.totals[key] for key in BY_PEOPLE)

    def legend(self) -> list[tuple[str, str, str, int]]:
        """(outcome, label, history link, count) for each outcome."""
        return [
            (key, label, self.history_url(**filters), self.totals[key])
            for key, (label, filters) in OUTCOMES.items()
        ]

    def history_url(self, **filters) -> str:
        """The history page listing the window's proposals narrowed by ``filters``."""
        window = {"since": self.first_day.isoformat(), "until": self.last_day.isoformat()}
        query = {**window, **{k: v for k, v in filters.items() if v not in (None, "")}}
        return reverse("console:history") + "?" + urlencode(query)


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def window_start(days: int, now: datetime | None = None) -> tuple[date, datetime]:
    """The first day of a window of ``days`` days ending today, and its first instant."""
    today = timezone.localdate(now or timezone.now())
    first = today - timedelta(days=days - 1)
    return first, _midnight(first)


def overview(days: int = DEFAULT_WINDOW, now: datetime | None = None) -> Overview:
    now = now or timezone.now()
    first_day, _ = window_start(days, now)
    window_days = [first_day + timedelta(days=i) for i in range(days)]
    tallies = _stored(window_days)
    missing = [day for day in window_days if day not in tallies]
    if missing:  # counted from the first day not kept to the window's end, in a few queries
        counted = _count(missing[0], (window_days[-1] - missing[0]).days + 1)
        _keep({day: counted[day] for day in missing if _settled(day, counted[day], now)})
        tallies.update({day: counted[day] for day in missing})
    per_day = {
        day: tallies[day]["outcomes"]
        for day in window_days
        if sum(tallies[day]["outcomes"].values())
    }
    totals = _summed(tallies.values(), "outcomes", dict.fromkeys(OUTCOMES, 0))
    waits = sorted(wait for tally in tallies.values() for wait in tally["waits"])
    teams: dict[str, list[float]] = {}
    for tally in tallies.values():
        for team, seconds in tally["team_waits"].items():
            teams.setdefault(team, []).extend(seconds)
    agents = _summed(tallies.values(), "agents", {})
    names = dict(Agent.objects.filter(pk__in=agents).values_list("pk", "name"))
    return Overview(
        days=days,
        first_day=first_day,
        last_day=window_days[-1],
        per_day=per_day,
        totals=totals,
        p50=_nearest_rank(waits, 50),
        p95=_nearest_rank(waits, 95),
        risk={int(score): n for score, n in _summed(tallies.values(), "risk", {}).items()},
        top_agents=_top({names.get(int(pk), f"#{pk}"): n for pk, n in agents.items()}),
        top_actions=_top(_summed(tallies.values(), "actions", {})),
        oldest_waiting=list(
            Proposal.objects.pending()
            .select_related("agent")
            .order_by("created_at", "pk")[:OLDEST_WAITING]
        ),
        waits_per_day=[
            (day, *_spread(tallies[day]["waits"]))
            for day in reversed(window_days)
            if tallies[day]["waits"]
        ],
        waits_per_team=[(team, *_spread(teams[team])) for team in sorted(teams)],
    )


def _spread(waits: list[float]) -> tuple[int, timedelta, timedelta]:
    """How many waits, their median and p95."""
    ordered = sorted(waits)
    return len(ordered), _nearest_rank(ordered, 50), _nearest_rank(ordered, 95)


# A day is settled once it ended this long ago (every proposal written on it has
# committed) with none of its proposals waiting: its figures no longer change.
SETTLED_AFTER = timedelta(hours=1)


def _settled(day: date, tally: dict, now: datetime) -> bool:
    return (
        _midnight(day + timedelta(days=1)) + SETTLED_AFTER <= now
        and not tally["outcomes"]["pending"]
    )


def _stored(days: list[date]) -> dict[date, dict]:
    rows = OverviewDay.objects.filter(
        time_zone=timezone.get_current_timezone_name(), day__gte=days[0], day__lte=days[-1]
    ).values_list("day", "data")
    return dict(rows)


def _keep(tallies: dict[date, dict]) -> None:
    zone = timezone.get_current_timezone_name()
    OverviewDay.objects.bulk_create(
        [OverviewDay(day=day, time_zone=zone, data=tally) for day, tally in tallies.items()],
        ignore_conflicts=True,  # another view counted it first: the same figures
    )


def forget_tallies() -> None:
    """Forget every kept tally: what changes settled days (retention, a seeded past) calls it."""
    OverviewDay.objects.all().delete()


def _count(first_day: date, days: int) -> dict[date, dict]:
    """Each day's figures from ``first_day`` on, ``days`` days: one grouped query per figure."""
    start = _midnight(first_day)
    rows = Proposal.objects.filter(
        created_at__gte=start, created_at__lt=_midnight(first_day + timedelta(days=days))
    ).order_by()
    day = _day_number(first_day, days)
    tallies = {
        first_day + timedelta(days=i): {
            "outcomes": dict.fromkeys(OUTCOMES, 0),
            "risk": {},
            "agents": {},
            "actions": {},
            "waits": [],
            "team_waits": {},
        }
        for i in range(days)
    }

    def at(index: int) -> dict:
        return tallies[first_day + timedelta(days=index)]

    for index, outcome, n in day_outcome_counts(rows, first_day, days):
        at(index)["outcomes"][outcome] = n
    for figure, column in (("risk", "risk_score"), ("agents", "agent_id"), ("actions", "action")):
        for index, value, n in (
            rows.annotate(day=day).values_list("day", column).annotate(n=Count("id"))
        ):
            at(index)[figure][str(value)] = n
    wait = Seconds(F("decided_at"), F("created_at"))
    decided = rows.filter(DECIDED_BY_PEOPLE, decided_at__isnull=False)
    for index, seconds, routing in decided.annotate(day=day, wait=wait).values_list(
        "day", "wait", "routing"
    ):
        at(index)["waits"].append(round(float(seconds), 3))
        for team in (routing or {}).get("require", {}):
            at(index)["team_waits"].setdefault(team, []).append(round(float(seconds), 3))
    return tallies


def _summed(tallies, figure: str, into: dict) -> dict:
    for tally in tallies:
        for key, n in tally[figure].items():
            into[key] = into.get(key, 0) + n
    return into


def _nearest_rank(waits: list[float], percent: int) -> timedelta | None:
    """The nearest-rank percentile of the sorted ``waits`` (seconds)."""
    if not waits:
        return None
    return timedelta(seconds=waits[max(-(-percent * len(waits) // 100), 1) - 1])


def _top(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP]


def _day_number(first_day: date, days: int) -> Case:
    """The day a row was written, as its number from ``first_day``, bucketed in SQL by the
    local midnights (not TruncDate: on SQLite that is a Python function called for every row)."""
    midnights = [_midnight(first_day + timedelta(days=i + 1)) for i in range(days)]
    return Case(
        *[W(created_at__lt=midnight, then=Value(i)) for i, midnight in enumerate(midnights)],
        default=Value(days - 1),
        output_field=IntegerField(),
    )


def day_outcome_counts(window, first_day: date, days: int):
    """(day number, outcome, count) rows of ``window``, read from the ``proposal_outcomes`` index."""
    return (
        window.annotate(day=_day_number(first_day, days), outcome=outcome_expression())
        .values_list("day", "outcome")
        .annotate(n=Count("id"))
    )


class Seconds(Func):
    """Seconds from the second datetime to the first, in the database's own arithmetic."""

    arg_joiner = " - "
    template = "EXTRACT(EPOCH FROM (%(expressions)s))"
    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra):
        # Django's own datetime subtraction calls a Python function for every row here.
        return super().as_sql(
            compiler,
            connection,
            template="((julianday(%(expressions)s)) * 86400.0)",
            arg_joiner=") - julianday(",
            **extra,
        )
