"""Small template filters the console's pages share."""

from __future__ import annotations

import json
import re

from django import template

from approvals.choices import risk_band as band_of
from approvals.gateway.models import Upstream
from approvals.policy.risk import top_reasons as strongest
from executions.actions import target_text

register = template.Library()

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@register.filter
def risk_band(score: int) -> str:
    """low / medium / high, the bands the queue filters by."""
    return band_of(score)


@register.filter
def top_reasons(proposal) -> list[str]:
    """The one or two strongest reasons that are not its action's base risk."""
    return strongest(proposal.action, proposal.risk_reasons)


@register.filter
def target(proposal) -> str:
    """What it acts on, in words: "container web-1", "service nginx · host host-a"."""
    return target_text(proposal.action, proposal.parameters)


@register.filter
def strip_ansi(text: str) -> str:
    """Output without colour codes, for the page without JavaScript."""
    return ANSI_ESCAPE.sub("", text)


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@register.filter
def readable_arguments(arguments) -> list[tuple[str, str]]:
    """A tool call's arguments as (name, value) lines: text as it is, the rest as JSON."""
    if not isinstance(arguments, dict):
        return []
    return [
        (name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        for name, value in arguments.items()
    ]


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


@register.filter
def timespan(value) -> str:
    """A timedelta as people say it: 40 s, 12 min, 3 h 5 min, 2 d 4 h."""
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if minutes < 60:
        return f"{minutes} min"
    if hours < 24:
        return f"{hours} h {minutes % 60} min" if minutes % 60 else f"{hours} h"
    return f"{days} d {hours % 24} h" if hours % 24 else f"{days} d"


@register.filter
def gateway_upstream(tool: str) -> str:
    """The upstream server of the MCP gateway a tool's name starts with (``billing.refund``
    → ``billing``), if one is configured and enabled; else ``""``."""
    server = str(tool).partition(".")[0]
    return server if Upstream.objects.filter(name=server, enabled=True).exists() else ""
