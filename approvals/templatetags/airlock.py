"""Small template filters the console's pages share."""

from __future__ import annotations

import json
import re

from django import template

from approvals.forms import RISK_BANDS

register = template.Library()

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@register.filter
def risk_band(score: int) -> str:
    """low / medium / high, the bands the queue filters by."""
    return next((band for band, (_, high) in RISK_BANDS.items() if score <= high), "high")


@register.filter
def strip_ansi(text: str) -> str:
    """Output without colour codes, for the page without JavaScript."""
    return ANSI_ESCAPE.sub("", text)


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@register.filter
def duration(ms: int | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes} min {seconds} s"
