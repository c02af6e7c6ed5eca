"""Queries compiled once and run many times: the hot reads of the API.

Django builds and compiles a queryset's SQL every time it is evaluated. For
a lookup by key that is most of the cost: 0.5 ms of 0.6 ms for a proposal's
row on SQLite, where running the same SQL takes 0.07 ms. A ``Prepared`` query
is written as an ordinary ``.values()`` queryset, compiled on first use on
each database connection, and afterwards runs its SQL with the new
arguments and converts the rows with the compiler's own converters (JSON,
aware datetimes), so the rows are exactly what the queryset would give.

    proposal_row = Prepared(lambda pk: Proposal.objects.filter(pk=pk).values("id", "status"), pk=0)
    proposal_row.first(pk=7)  # {"id": 7, "status": "pending"} or None

Arguments are found in the compiled parameters by a sample value of their
type unlikely to occur otherwise; a query whose SQL would depend on an
argument's value (``__in`` with a list, a ``LIKE`` pattern) cannot be
prepared, and saying so at compile time is the point of the check.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connections
from django.db.models import QuerySet
from django.db.models.sql.compiler import SQLCompiler

_SAMPLE_INT = -7_291_038_475_610_273
_SAMPLE_STR = "\x00airlock-prepared-argument-{}\x00"


@dataclass
class _Compiled:
    sql: str
    params: list
    slots: dict[int, str]  # parameter position → argument name
    compiler: SQLCompiler
    converters: dict  # column position → the field's converters (JSON, aware datetimes)
    names: list[str]


class Prepared:
    """A ``.values()`` queryset of ``build(**arguments)``, compiled once per connection."""

    def __init__(self, build: Callable[..., QuerySet], using: str = "default", **types):
        self.build = build
        self.using = using
        self.samples = {name: self._sample(name, kind) for name, kind in types.items()}
        self._compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @staticmethod
    def _sample(name: str, kind: type) -> object:
        if kind is int:
            return _SAMPLE_INT - len(name)  # distinct per name
        if kind is str:
            return _SAMPLE_STR.format(name)
        raise TypeError(f"argument {name}: only int and str arguments can be prepared")

    def rows(self, **arguments) -> list[dict]:
        connection = connections[self.using]
        compiled = self._compiled.get(connection) or self._compile(connection)
        params = list(compiled.params)
        for position, name in compiled.slots.items():
            params[position] = arguments[name]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            fetched = cursor.fetchall()
        if compiled.converters:
            fetched = compiled.compiler.apply_converters(fetched, compiled.converters)
        return [dict(zip(compiled.names, row, strict=True)) for row in fetched]

    def first(self, **arguments) -> dict | None:
        found = self.rows(**arguments)
        return found[0] if found else None

    def _compile(self, connection) -> _Compiled:
        queryset = self.build(**self.samples)
        query = queryset.query
        if not query.values_select and not query.annotation_select:
            raise TypeError("a prepared query is a .values() queryset")
        compiler = query.get_compiler(self.using, connection=connection)
        sql, params = compiler.as_sql()
        slots = {}
        for name, sample in self.samples.items():
            found = [i for i, value in enumerate(params) if value == sample]
            if not found:
                raise ValueError(f"argument {name} is not a parameter of the compiled query")
            slots.update(dict.fromkeys(found, name))
        columns = [column for column, _, _ in compiler.select[: compiler.col_count]]
        compiled = _Compiled(
            sql,
            list(params),
            slots,
            compiler,
            compiler.get_converters(columns),
            [*query.extra_select, *query.values_select, *query.annotation_select],
        )
        with self._lock:
            self._compiled[connection] = compiled
        return compiled
