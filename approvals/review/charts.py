"""Chart geometry for the overview, drawn as inline SVG by the templates.

Python works out the rectangles, ticks and links; the templates only place
them, and the colours come from the stylesheet. No chart library, nothing
fetched: the console works offline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta

from approvals.review.overview import OUTCOMES, Overview
from approvals.templatetags.airlock import risk_band

BAR_SHARE = 0.72  # of a day's slot; the rest is the gap between bars


@dataclass
class Box:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str
    href: str


@dataclass
class Tick:
    x: float
    y: float
    label: str


@dataclass
class Chart:
    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    labels: list[Tick] = field(default_factory=list)  # text beside bars
    plot_left: float = 0
    plot_right: float = 0
    plot_bottom: float = 0
    grid: bool = True  # horizontal lines at the y ticks (a ranking's ticks are its names)
    label_anchor: str = "start"
    label_css: str = "value"

    @property
    def empty(self) -> bool:
        return not self.boxes


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 × 10ⁿ at or above ``value`` (an axis maximum)."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _y_ticks(top: int, y0: float, scale: float, x: float) -> list[Tick]:
    values = sorted({0, top // 2, top})
    return [Tick(x, round(y0 - value * scale, 1), f"{value:,}") for value in values]


def per_day(view: Overview, width: int = 760, height: int = 230) -> Chart:
    """Proposals per day, one stacked bar a day, a segment per outcome."""
    left, right, top, bottom = 44, 8, 10, 24
    chart = Chart(width, height, plot_left=left, plot_right=width - right)
    chart.plot_bottom = height - bottom
    days = [view.first_day + timedelta(days=i) for i in range(view.days)]
    highest = nice_ceiling(max((sum(view.per_day.get(d, {}).values()) for d in days), default=0))
    scale = (chart.plot_bottom - top) / highest
    slot = (chart.plot_right - left) / len(days)
    every = math.ceil(len(days) / 10)
    for i, day in enumerate(days):
        x = left + i * slot + slot * (1 - BAR_SHARE) / 2
        y = chart.plot_bottom
        for key, (label, filters) in OUTCOMES.items():
            n = view.per_day.get(day, {}).get(key, 0)
            if n:
                y -= n * scale
                chart.boxes.append(
                    Box(
                        round(x, 1),
                        round(y, 1),
                        round(slot * BAR_SHARE, 1),
                        round(n * scale, 1),
                        f"o-{key}",
                        f"{day:%a %-d %b}: {n:,} {label}",
                        view.history_url(since=day, until=day, **filters),
                    )
                )
        if i % every == 0:
            chart.x_ticks.append(
                Tick(round(left + (i + 0.5) * slot, 1), height - 6, f"{day:%-d %b}")
            )
    chart.y_ticks = _y_ticks(highest, chart.plot_bottom, scale, left - 6)
    return chart


def risk(view: Overview, width: int = 360, height: int = 200) -> Chart:
    """How many proposals had each risk score, 0 to 10."""
    left, right, top, bottom = 44, 6, 10, 24
    chart = Chart(width, height, plot_left=left, plot_right=width - right)
    chart.plot_bottom = height - bottom
    highest = nice_ceiling(max(view.risk.values(), default=0))
    scale = (chart.plot_bottom - top) / highest
    slot = (chart.plot_right - left) / 11
    for score in range(11):
        x = left + score * slot
        n = view.risk.get(score, 0)
        if n:
            chart.boxes.append(
                Box(
                    round(x + slot * 0.12, 1),
                    round(chart.plot_bottom - n * scale, 1),
                    round(slot * 0.76, 1),
                    round(n * scale, 1),
                    f"risk-{risk_band(score)}",
                    f"risk {score}: {n:,} proposals",
                    view.history_url(score=score),
                )
            )
        chart.x_ticks.append(Tick(round(x + slot / 2, 1), height - 6, str(score)))
    chart.y_ticks = _y_ticks(highest, chart.plot_bottom, scale, left - 6)
    return chart


def ranking(
    view: Overview, rows: list[tuple[str, int]], filter_name: str, width: int = 360
) -> Chart:
    """Horizontal bars, longest first: the top agents or actions of the window."""
    label_width, row_height = 170, 26
    height = max(len(rows), 1) * row_height + 4
    chart = Chart(width, height, plot_left=label_width, plot_right=width - 56, grid=False)
    highest = max((n for _, n in rows), default=1)
    span = chart.plot_right - label_width
    for i, (name, n) in enumerate(rows):
        y = 4 + i * row_height
        bar = max(span * n / highest, 2)
        chart.boxes.append(
            Box(
                label_width,
                y,
                round(bar, 1),
                row_height - 8,
                "rank",
                f"{name}: {n:,} proposals",
                view.history_url(**{filter_name: name}),
            )
        )
        short = name if len(name) <= 24 else name[:23] + "…"
        chart.y_ticks.append(Tick(label_width - 8, y + row_height / 2, short))
        chart.labels.append(Tick(round(label_width + bar + 6, 1), y + row_height / 2, f"{n:,}"))
    return chart


def share(view: Overview, width: int = 760, height: int = 34) -> Chart:
    """Who decided: policy, people, nobody in time, the agent taking it back, or still
    waiting, as one bar."""
    parts = [
        ("policy", "decided by policy", view.by_policy, {"decided_by": "policy"}),
        ("people", "decided by reviewers", view.by_people, {"decided_by": "people"}),
        ("expired", "expired unreviewed", view.totals["expired"], {"status": "expired"}),
        ("withdrawn", "withdrawn by the agent", view.totals["withdrawn"], {"status": "withdrawn"}),
        ("pending", "waiting", view.totals["pending"], {"status": "pending"}),
    ]
    chart = Chart(
        width, height, plot_right=width, grid=False, label_anchor="middle", label_css="inside"
    )
    total = sum(n for _, _, n, _ in parts)
    x = 0.0
    for key, label, n, filters in parts:
        if not n:
            continue
        part = width * n / total
        percent = f"{100 * n / total:.0f}%"
        chart.boxes.append(
            Box(
                round(x, 1),
                0,
                round(part, 1),
                height,
                f"share-{key}",
                f"{percent} {label} ({n:,})",
                view.history_url(**filters),
            )
        )
        if part > 44:
            chart.labels.append(Tick(round(x + part / 2, 1), height / 2, percent))
        x += part
    return chart


def all_charts(view: Overview) -> dict[str, Chart]:
    return {
        "per_day": per_day(view),
        "share": share(view),
        "risk": risk(view),
        "agents": ranking(view, view.top_agents, "agent"),
        "actions": ranking(view, view.top_actions, "action"),
    }
