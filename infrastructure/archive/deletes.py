"""Deletes of what retention archived: set-based, a statement per table, no row read first.

``delete_set`` removes rows with what refers to them as each reference's
``on_delete`` says, through statements compiled once per model (Django's
collector reads every row, its JSON too, before it deletes, and a queryset
per table costs more Python than the statement costs the database).
``delete_batched`` removes a queryset's rows a bounded batch per statement,
each its own short transaction, so that no writer of the hot path waits long
behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from django.db import connection, connections, models, transaction
from django.db.models import ProtectedError

from .rows import KEYS, marks


def delete_batched(rows, batch: int = 1000, last: Callable[[], object] | None = None) -> int:
    """Delete the rows of queryset ``rows``, at most ``batch`` per statement, each statement
    its own transaction; how many. The rows are chosen inside the statement: none is read
    into Python. ``last`` runs in the transaction of the last statement (the one that finds
    fewer than ``batch``), so that what it writes commits with the last of the rows."""
    target = connections[rows.db]
    quote = target.ops.quote_name
    meta = rows.model._meta
    chosen, params = rows.order_by().values("pk")[:batch].query.sql_with_params()
    statement = f"DELETE FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} IN ({chosen})"
    deleted = 0
    while True:
        with transaction.atomic(using=rows.db), target.cursor() as cursor:
            cursor.execute(statement, params)
            count = cursor.rowcount
            if count < batch and last is not None:
                last()
        deleted += count
        if count < batch:
            return deleted


def delete_set(model, pks: list) -> None:
    """Delete the rows of ``model`` whose keys are ``pks``, and what refers to them as each
    reference's ``on_delete`` says. Call inside a transaction.

    CASCADE deletes the referring rows (their own referrers first), SET_NULL empties the
    reference, DO_NOTHING leaves it; PROTECT and RESTRICT refuse (``ProtectedError``) when a
    row still refers; any other rule is left to Django's collector.
    """
    if not pks:
        return
    plan = _plan(model)
    if plan is None:
        model._base_manager.filter(pk__in=pks).delete()
        return
    keys = marks(pks)
    with connection.cursor() as cursor:
        for refused, statement in plan:
            cursor.execute(statement.replace(KEYS, keys), pks)
            if refused and cursor.fetchone():
                raise ProtectedError(f"{refused} rows refer to them", [])


@cache
def _plan(model) -> tuple[tuple[str, str], ...] | None:
    """The statements that delete a set of ``model``'s rows, each naming the set once as
    ``KEYS``, each with the model a refusing check names (else ""); None when a reference's
    rule needs Django's collector."""
    steps: list[tuple[str, str]] = []
    return tuple(steps) if _steps(model, KEYS, steps) else None


def _steps(model, keys: str, steps: list) -> bool:
    quote = connection.ops.quote_name
    meta = model._meta
    for relation in _referrers(model):
        related = relation.related_model
        table, column = quote(related._meta.db_table), quote(relation.field.column)
        target = relation.field.target_field
        keyed = keys
        if target.column != meta.pk.column:  # a reference to another unique column
            keyed = f"SELECT {quote(target.column)} FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} IN ({keys})"
        rule = relation.on_delete
        if rule is models.CASCADE:
            chosen = (
                f"SELECT {quote(related._meta.pk.column)} FROM {table} WHERE {column} IN ({keyed})"
            )
            if not _steps(related, chosen, steps):
                return False
        elif rule is models.SET_NULL:
            steps.append(("", f"UPDATE {table} SET {column} = NULL WHERE {column} IN ({keyed})"))
        elif rule in (models.PROTECT, models.RESTRICT):
            steps.append(
                (related.__name__, f"SELECT 1 FROM {table} WHERE {column} IN ({keyed}) LIMIT 1")
            )
        elif rule is not models.DO_NOTHING:
            return False
    steps.append(
        ("", f"DELETE FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} IN ({keys})")
    )
    return True


def _referrers(model) -> list:
    """The references to ``model`` from other tables (hidden ones too), as Django's collector
    finds them."""
    return [
        field
        for field in model._meta.get_fields(include_hidden=True)
        if field.auto_created and not field.concrete and (field.one_to_one or field.one_to_many)
    ]
