"""Lists over the API: filters read from the query string, orders, keyset cursors, one page.

A list endpoint declares its filters (``Filters``) and orders (``Order``) and
answers ``page(queryset, order, cursor, limit)``. Pages are cut by keyset, not
by offset: a cursor holds the sort key of the last row handed out, and the next
page is the rows after it in the order. Rows inserted meanwhile never shift a
page (no row is shown twice or skipped), a page costs the same at row ten
million as at row ten, and the order's last field is unique (the id), so ties
are broken the same way every time.

Every mistake in a query string is a 400 that names the parameter and what it
takes; an unknown parameter is one too, so a typo is not a silent "no filter".
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter

from infrastructure.rest.errors import ApiError

LIMIT_DEFAULT = 50
LIMIT_MAX = 200
PAGING = ("cursor", "limit")


def invalid(name: str, message: str) -> ApiError:
    return ApiError(400, "validation_error", f"{name}: {message}")


@dataclass(frozen=True)
class Order:
    """A named order: fields with their direction, the last one unique (``id``)."""

    name: str
    fields: tuple[tuple[str, bool], ...]  # (field, descending)
    description: str = ""

    def by(self) -> list[str]:
        return [f"-{field}" if descending else field for field, descending in self.fields]

    def after(self, key: list) -> Q:
        """Rows after the row whose sort key is ``key``, in this order.

        ``(a < x) OR (a = x AND b < y) OR …``, and first ``a <= x``: a bound on the
        leading field alone, which an index on it turns into a range scan (the OR
        alone, SQLite reads the table from the start: 0.6 s a page at a million rows).
        """
        after = Q()
        for index, (field, descending) in enumerate(self.fields):
            same = {name: key[i] for i, (name, _) in enumerate(self.fields[:index])}
            step = Q(**same, **{f"{field}__{'lt' if descending else 'gt'}": key[index]})
            after |= step
        first, descending = self.fields[0]
        return Q(**{f"{first}__{'lte' if descending else 'gte'}": key[0]}) & after


def _key_value(value):
    return value.isoformat() if isinstance(value, dt.datetime) else value


def encode_cursor(order: Order, row: dict) -> str:
    key = [_key_value(row[field]) for field, _ in order.fields]
    raw = json.dumps([order.name, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(order: Order, cursor: str) -> list:
    """The sort key a cursor holds, checked against ``order``; 400 for anything else."""
    bad = invalid("cursor", "not a cursor this list handed out; start again without one")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        name, key = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise bad from None
    if name != order.name:
        raise invalid("cursor", f"it belongs to the order {name!r}, not {order.name!r}")
    if not isinstance(key, list) or len(key) != len(order.fields):
        raise bad
    values = []
    for (field, _), value in zip(order.fields, key, strict=True):
        # A time (``*_at``) travels as ISO text, anything else is a number a key holds.
        if field.endswith("_at"):
            value = parse_datetime(value) if isinstance(value, str) else None
            if value is None:
                raise bad
        elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise bad
        values.append(value)
    return values


def page(queryset, order: Order, cursor: str | None, limit: int) -> tuple[list[dict], str | None]:
    """One page of ``queryset`` (of ``.values()`` rows) and the cursor of the next, if any."""
    if cursor:
        queryset = queryset.filter(order.after(decode_cursor(order, cursor)))
    rows = list(queryset.order_by(*order.by())[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(order, rows[-1]) if more else None


@dataclass(frozen=True)
class Paths:
    """Where the filters every list shares look, from the listed rows (``proposal__…``)."""

    risk: str
    agent: str
    reviewer: str
    text: str  # the relation to the row whose text index ``q`` searches; "" for the row itself


def shared_filters(filters: Filters, rows, paths: Paths):
    """``rows`` narrowed by risk range, action glob, agent, reviewer, time, text and
    ``since_id``: the filters the proposals and the executions lists both take."""
    risk_min = filters.integer("risk_min", 0, 10)
    if risk_min is not None:
        rows = rows.filter(**{f"{paths.risk}__gte": risk_min})
    risk_max = filters.integer("risk_max", 0, 10)
    if risk_max is not None:
        rows = rows.filter(**{f"{paths.risk}__lte": risk_max})
    action = filters.text("action", 100)
    if action:
        rows = rows.filter(glob_filter("action", action))
    agent = filters.text("agent", 100)
    if agent:
        rows = rows.filter(**{paths.agent: agent})
    reviewer = filters.text("reviewer", 150)
    if reviewer:  # one decision per reviewer and proposal: the join adds no duplicates
        rows = rows.filter(**{paths.reviewer: reviewer})
    since = filters.moment("created_since")
    if since:
        rows = rows.filter(created_at__gte=since)
    until = filters.moment("created_until")
    if until:
        rows = rows.filter(created_at__lt=until)
    text = filters.text("q")
    if text:
        model = rows.model._meta.get_field(paths.text).related_model if paths.text else rows.model
        rows = rows.filter(model.text_index.matching(text, via=paths.text))
    since_id = filters.integer("since_id", 0, 2**63 - 1)
    if since_id is not None:
        rows = rows.filter(id__gt=since_id)
    return rows


def glob_filter(field: str, pattern: str) -> Q:
    """Rows whose ``field`` matches a glob: exact without wildcards, a prefix for ``name*``
    (both use an index), else a regular expression."""
    if "*" not in pattern and "?" not in pattern:
        return Q(**{field: pattern})
    if pattern.endswith("*") and not any(char in pattern[:-1] for char in "*?"):
        return Q(**{f"{field}__startswith": pattern[:-1]})
    return Q(**{f"{field}__regex": glob_regex(pattern)})


def glob_regex(pattern: str) -> str:
    """A glob (``docker.*``, ``host.service_?``) as an anchored regular expression that
    PostgreSQL and Python (SQLite's REGEXP) read alike."""
    parts = []
    for char in pattern:
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        elif char.isalnum() or char == "_":
            parts.append(char)
        else:
            parts.append("\\" + char if char.isascii() else char)
    return "^" + "".join(parts) + "$"


class Filters:
    """A list's query parameters, read and checked one by one; ``done()`` refuses the rest."""

    def __init__(self, params, known: Iterable[str], waits: bool = False):
        self.params = params
        self.known = set(known) | set(PAGING) | ({"wait"} if waits else set())
        unknown = sorted(set(params) - self.known)
        if unknown:
            raise invalid(
                unknown[0],
                f"not a parameter of this list; it takes {', '.join(sorted(self.known))}",
            )

    def raw(self, name: str) -> str | None:
        values = self.params.getlist(name)
        if len(values) > 1:
            raise invalid(name, "given more than once; give several values comma-separated")
        value = values[0] if values else None
        if value is not None and "\x00" in value:
            raise invalid(name, "holds a NUL character")
        return value or None

    def choices(self, name: str, allowed: Iterable[str]) -> list[str]:
        """Comma-separated values, each one of ``allowed``."""
        allowed = list(allowed)
        raw = self.raw(name)
        if raw is None:
            return []
        values = [value.strip() for value in raw.split(",") if value.strip()]
        for value in values:
            if value not in allowed:
                raise invalid(name, f"{value!r} is not one of {', '.join(allowed)}")
        return values

    def choice(self, name: str, allowed: Iterable[str], default: str) -> str:
        """One of ``allowed``, or ``default`` when not given."""
        values = self.choices(name, allowed)
        if len(values) > 1:
            raise invalid(name, f"takes one value, got {len(values)}")
        return values[0] if values else default

    def integer(self, name: str, minimum: int, maximum: int) -> int | None:
        raw = self.raw(name)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise invalid(name, f"must be a whole number, got {raw!r}") from None
        if not minimum <= value <= maximum:
            raise invalid(name, f"must be between {minimum} and {maximum}, got {value}")
        return value

    def moment(self, name: str) -> dt.datetime | None:
        """An ISO 8601 date or time; without a zone, UTC."""
        raw = self.raw(name)
        if raw is None:
            return None
        try:
            value = parse_datetime(raw)
            if value is None and re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
                value = dt.datetime.fromisoformat(raw)
        except ValueError:
            value = None
        if value is None:
            raise invalid(
                name, f"must be an ISO 8601 time such as 2026-11-26T09:00:00Z, got {raw!r}"
            )
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)

    def text(self, name: str, max_length: int = 200) -> str | None:
        raw = self.raw(name)
        if raw is not None and len(raw) > max_length:
            raise invalid(name, f"must be at most {max_length} characters")
        if raw is not None and any(0xD800 <= ord(char) <= 0xDFFF for char in raw):
            raise invalid(name, "holds a lone surrogate, which is not text")
        return raw

    def paging(self) -> tuple[str | None, int]:
        """``cursor`` and ``limit``; ``wait`` checked too (the waiting is the caller's)."""
        limit = self.integer("limit", 1, LIMIT_MAX)
        raw = self.raw("wait") if "wait" in self.known else None
        if raw is not None:
            most = settings.LONG_POLL_MAX_SECONDS
            try:
                wait = float(raw)
            except ValueError:
                raise invalid("wait", f"must be a number of seconds, got {raw!r}") from None
            if not 0 <= wait <= most:  # NaN is not either
                raise invalid("wait", f"must be between 0 and {most}")
        return self.text("cursor", 2000), LIMIT_DEFAULT if limit is None else limit


def paging_parameters(
    default_order: str, orders: dict[str, Order], waits: bool = False
) -> list[OpenApiParameter]:
    """The schema of ``order``, ``cursor``, ``limit`` (and ``wait``) for a list."""
    waiting = [
        OpenApiParameter(
            "wait",
            float,
            description=f"an empty page waits up to this many seconds (at most "
            f"{settings.LONG_POLL_MAX_SECONDS}) for a row that matches, and answers as soon "
            "as there is one",
        )
    ]
    return [
        OpenApiParameter(
            "order",
            str,
            enum=list(orders),
            description=f"{default_order}. "
            + " ".join(f"`{name}`: {order.description}." for name, order in orders.items()),
        ),
        OpenApiParameter(
            "cursor",
            str,
            description="`next_cursor` of the page before; the order must be the same",
        ),
        OpenApiParameter(
            "limit", int, description=f"rows per page, 1 to {LIMIT_MAX} (default {LIMIT_DEFAULT})"
        ),
        *(waiting if waits else []),
    ]


def comma_list(name: str, allowed: Iterable[str], what: str) -> OpenApiParameter:
    allowed = list(allowed)
    return OpenApiParameter(
        name,
        str,
        description=f"{what}: one or several of {', '.join(allowed)}, comma-separated",
        # A comma-separated list of the values: a pattern, not an enum, so that
        # "pending,approved" is as valid to the schema as to the endpoint.
        pattern=rf"^({'|'.join(map(re.escape, allowed))})(,({'|'.join(map(re.escape, allowed))}))*$",
    )
