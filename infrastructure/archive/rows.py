"""Rows written as archive lines by the database itself: no model instance, no Python per
value.

``Columns(model).object(alias)`` is the SQL of a row as the JSON object
``QuerySet.values()`` would give: the fields' attnames as keys, times in ISO
8601 with their offset (UTC), JSON columns as JSON, flags as ``true`` and
``false``. The functions below build the rest of a line (arrays of a
subquery's rows in order, a nested row) for SQLite and PostgreSQL, each in
its own JSON functions, so that a retention pass reads finished lines: a
million rows rendered through ``values()`` and Python's encoder took most of
a pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from django.db import connection, models

KEYS = "{keys}"  # where a statement names the set of rows it reads or acts on
_PLAIN, _TIME, _JSON, _FLAG = range(4)
# Pairs per call of a JSON object function: SQLite takes 127 arguments, PostgreSQL 100.
_PAIRS_PER_CALL = 40


def marks(values: Sequence) -> str:
    """``%s, %s, …``: one parameter per value, for ``IN (…)``."""
    return ", ".join(["%s"] * len(values))


def fetch(sql: str, params: Sequence = ()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def lines(sql: str, keys: Sequence, per_read: int) -> Iterator[str]:
    """The first column of ``sql``'s rows for ``keys``, read ``per_read`` keys at a time:
    ``sql`` names the batch as ``KEYS`` (``… WHERE id IN ({keys})``)."""
    for first in range(0, len(keys), per_read):
        batch = keys[first : first + per_read]
        for (line,) in fetch(sql.replace(KEYS, marks(batch)), batch):
            yield line


class Columns:
    """A model's concrete columns, and the SQL that renders a row of them as JSON."""

    def __init__(self, model: type[models.Model]):
        self.fields = [
            (field.attname, field.column, _kind(field)) for field in model._meta.concrete_fields
        ]

    def object(self, alias: str, more: Sequence[tuple[str, str]] = ()) -> str:
        """SQL: the row ``alias`` as a JSON object (a JSON value, to nest or to ``as_text``), with
        the members ``more`` (name, SQL of a value) after its columns."""
        quote = connection.ops.quote_name
        pairs = [
            (name, _value(kind, f"{alias}.{quote(column)}")) for name, column, kind in self.fields
        ]
        return json_object([*pairs, *more])


def json_object(pairs: Sequence[tuple[str, str]]) -> str:
    """SQL: a JSON object of (name, SQL of a value) pairs; a value that is JSON stays JSON."""
    first, rest = pairs[:_PAIRS_PER_CALL], pairs[_PAIRS_PER_CALL:]
    members = ", ".join(f"'{name}', {value}" for name, value in first)
    if not _sqlite():
        built = f"json_build_object({members})"
        return f"({built}::jsonb || {json_object(rest)}::jsonb)::json" if rest else built
    built = f"json_object({members})"
    for start in range(0, len(rest), _PAIRS_PER_CALL):  # set in (a merge patch drops nulls)
        more = rest[start : start + _PAIRS_PER_CALL]
        built = (
            f"json_insert({built}, {', '.join(f'{_path(name)}, {value}' for name, value in more)})"
        )
    return built


def _path(name: str) -> str:
    return f"'$.\"{name}\"'"


def json_array(values: Sequence[str]) -> str:
    """SQL: a JSON array of the SQL values."""
    return f"{'json_array' if _sqlite() else 'json_build_array'}({', '.join(values)})"


def json_rows(value: str, source: str, order: str) -> str:
    """SQL: a JSON array of ``value`` for each row of ``source`` (``FROM … WHERE …``) in
    ``order``; ``[]`` when it has none."""
    if _sqlite():  # an aggregate takes its rows in the order of an ordered subquery
        return (
            f"json((SELECT json_group_array(json(v)) FROM (SELECT {value} AS v {source} "
            f"ORDER BY {order})))"
        )
    return f"(SELECT coalesce(json_agg({value} ORDER BY {order}), '[]'::json) {source})"


def json_row(select: str) -> str:
    """SQL: the JSON value a one-row subquery ``select`` gives (null when it gives none)."""
    return f"json(({select}))" if _sqlite() else f"({select})"


def as_text(value: str) -> str:
    """SQL: a JSON value as text, to be read as a line."""
    return value if _sqlite() else f"({value})::text"


def iso_time(column: str) -> str:
    """SQL: a time column as ``datetime.isoformat()`` writes it in UTC (the fraction only
    when there is one)."""
    if _sqlite():  # stored as Django writes it: "YYYY-MM-DD HH:MM:SS[.ffffff]", in UTC
        return f"replace({column}, ' ', 'T') || '+00:00'"
    utc = f"({column} AT TIME ZONE 'UTC')"
    return (
        f"to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
        f"mod(date_part('microseconds', {utc})::integer, 1000000) = 0 THEN '' "
        f"ELSE to_char({utc}, '.US') END || '+00:00'"
    )


def flag(column: str) -> str:
    """SQL: a flag column as ``true`` or ``false`` (SQLite keeps flags as 0 and 1)."""
    if not _sqlite():
        return column
    return f"CASE WHEN {column} IS NULL THEN NULL WHEN {column} THEN json('true') ELSE json('false') END"


def _value(kind: int, column: str) -> str:
    if kind == _TIME:
        return iso_time(column)
    if kind == _JSON:  # SQLite keeps JSON as text: json() makes it JSON again (and checks it)
        return f"json({column})" if _sqlite() else column
    return flag(column) if kind == _FLAG else column


def _sqlite() -> bool:
    return connection.vendor == "sqlite"


def _kind(field: models.Field) -> int:
    if isinstance(field, models.DateTimeField):
        return _TIME
    if isinstance(field, models.JSONField):
        return _JSON
    if isinstance(field, models.BooleanField):
        return _FLAG
    if isinstance(
        field, models.DateField | models.TimeField | models.DecimalField | models.UUIDField
    ):
        raise TypeError(f"{field}: a {type(field).__name__} is not archived as a plain value yet")
    return _PLAIN
