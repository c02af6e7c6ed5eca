"""The overview: what happened to proposals over a window of days, in a few aggregate queries.

Every figure is one aggregate query over the window (grouped counts, or the
rows at two ranks for the percentiles), so the page costs the same number of
queries, and no Python loop over rows, at a hundred or a hundred thousand
proposals. The counts read the ``proposal_outcomes`` index alone.
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
    Window,
)
from django.db.models import When as W
from django.db.models.functions import RowNumber
from django.urls import reverse
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.models import Proposal

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
    first_day, start = window_start(days, now)
    window = Proposal.objects.filter(created_at__gte=start).order_by()
    per_day, totals = _per_day(window, first_day, days)
    p50, p95 = _percentiles(window, totals["approved"] + totals["rejected"])
    return Overview(
        days=days,
        first_day=first_day,
        last_day=first_day + timedelta(days=days - 1),
        per_day=per_day,
        totals=totals,
        p50=p50,
        p95=p95,
        risk=dict(window.values_list("risk_score").annotate(n=Count("id")).order_by()),
        top_agents=_top(window, F("agent__name")),
        top_actions=_top(window, F("action")),
        oldest_waiting=list(
            Proposal.objects.pending()
            .select_related("agent")
            .order_by("created_at", "pk")[:OLDEST_WAITING]
        ),
    )


def day_outcome_counts(window, first_day: date, days: int):
    """(day number, outcome, count) rows; days are bucketed by their local midnights, in SQL."""
    midnights = [_midnight(first_day + timedelta(days=i + 1)) for i in range(days)]
    day = Case(
        *[W(created_at__lt=midnight, then=Value(i)) for i, midnight in enumerate(midnights)],
        default=Value(days - 1),
        output_field=IntegerField(),
    )  # not TruncDate: on SQLite that is a Python function called for every row
    return (
        window.annotate(day=day, outcome=outcome_expression())
        .values_list("day", "outcome")
        .annotate(n=Count("id"))
    )


def _per_day(window, first_day: date, days: int):
    rows = day_outcome_counts(window, first_day, days)
    per_day: dict[date, dict[str, int]] = {}
    totals = dict.fromkeys(OUTCOMES, 0)
    for index, outcome, n in rows:  # at most days × outcomes rows
        when = first_day + timedelta(days=index)
        per_day.setdefault(when, dict.fromkeys(OUTCOMES, 0))[outcome] = n
        totals[outcome] += n
    return per_day, totals


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


def _percentiles(window, decided: int) -> tuple[timedelta | None, timedelta | None]:
    """Nearest-rank p50 and p95 of the time people took to decide, in one ranked query."""
    if not decided:
        return None, None
    ranks = {percent: max(-(-percent * decided // 100), 1) for percent in (50, 95)}
    wait = Seconds(F("decided_at"), F("created_at"))
    rows = (
        window.filter(DECIDED_BY_PEOPLE, decided_at__isnull=False)
        .annotate(wait=wait, rank=Window(RowNumber(), order_by=[wait.asc(), F("id").asc()]))
        .filter(rank__in=set(ranks.values()))
        .values_list("rank", "wait")
    )
    found = {rank: timedelta(seconds=round(float(seconds), 3)) for rank, seconds in rows}
    return found.get(ranks[50]), found.get(ranks[95])


def _top(window, expression) -> list[tuple[str, int]]:
    rows = window.values(name=expression).annotate(n=Count("id")).order_by("-n", "name")[:TOP]
    return [(row["name"], row["n"]) for row in rows]
