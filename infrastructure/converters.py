"""``<id:pk>``: the path converter of every URL that names a row by its id.

Django's ``<int:…>`` takes any run of digits, and a number past a 64-bit
integer then reaches the database: SQLite refuses to bind it (``OverflowError``,
a 500; psycopg sends it as a ``numeric`` and PostgreSQL finds no row). The ORM's
lookups turn such a number into "no rows" on their own; the statements compiled
once (``infrastructure.prepared``) and raw SQL do not. This converter takes only
the ids a primary key can hold on either database, 0 to 2⁶³ − 1, so any other
number fails to resolve like any unknown URL: a 404 (under ``/api/`` in the
error shape, ``infrastructure.rest.errors``), before a view or a consumer runs.

Importing the module registers the converter; each URL module that uses it
imports it, so it is registered before the first pattern is read. The published
schema shows the range (``PATH_CONVERTER_OVERRIDES`` in ``console/settings.py``),
so a client knows it, and Schemathesis probes just past it.
"""

from __future__ import annotations

from django.urls import register_converter

ID_MAX = 2**63 - 1  # a signed 64-bit key: SQLite's INTEGER, PostgreSQL's bigint


class IdConverter:
    """Digits whose value a 64-bit primary key can hold; anything else does not match."""

    regex = "[0-9]+"

    def to_python(self, value: str) -> int:
        number = int(value)  # past 4300 digits a ValueError too: no match
        if number > ID_MAX:
            raise ValueError(f"{value} is past the largest id")
        return number

    def to_url(self, value: int) -> str:
        if not 0 <= int(value) <= ID_MAX:
            raise ValueError(f"{value} is not an id")
        return str(int(value))


register_converter(IdConverter, "id")
