"""Masking what was found: every occurrence of every secret, in a text or a JSON-able object.

A secret found once is replaced wherever it occurs, also where nothing around it
says it is one (a password from a URL, repeated in an error message). Occurrences
are replaced leftmost first, the longest at the same start, overlapping ones as one
(``shapes.resolve``), each by ``mask`` of what it covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .finding import Found, find, named_secret
from .shapes import SHORTEST_KNOWN, Matcher, known_matchers, mask, resolve, spans


def mask_text(
    text: str, known: Iterable[str] = (), patterns: Sequence[str] = ()
) -> tuple[str, list[Found]]:
    """``text`` with its secrets and the ``known`` raw values masked; what ``find`` found.

    A known value under 6 characters is ignored (too likely to be ordinary text).
    """
    found = find(text, patterns)
    return replace(text, [f.value for f in found], known), found


def mask_json(obj: Any, patterns: Sequence[str] = ()) -> tuple[Any, list[Found]]:
    """A copy of ``obj`` with every string masked, and what was found (each value once).

    Strings are searched one by one, and a dict's string value also by its key's name
    (``{"db_password": "..."}``); what is found anywhere is masked everywhere. Keys are
    kept as they are; tuples become lists.
    """
    found: dict[str, Found] = {}
    _collect(obj, patterns, found)
    return _masked(obj, _literals(found)), list(found.values())


def replace(text: str, values: Iterable[str], known: Iterable[str] = ()) -> str:
    """``text`` with every occurrence of ``values`` (any length) and ``known`` (6 and up) masked."""
    return _replace(text, _literals(values, known))


def _literals(values: Iterable[str], known: Iterable[str] = ()) -> tuple[Matcher, ...]:
    return (
        *known_matchers(values, shortest=1),
        *known_matchers(known, shortest=SHORTEST_KNOWN),
    )


def _replace(text: str, literals: tuple[Matcher, ...]) -> str:
    if not literals:
        return text
    pieces = []
    at = 0
    for span in resolve(spans(text, literals), text):
        pieces += (text[at : span.start], mask(span.value))
        at = span.end
    pieces.append(text[at:])
    return "".join(pieces)


def _collect(obj: Any, patterns: Sequence[str], found: dict[str, Found]) -> None:
    if isinstance(obj, str):
        for f in find(obj, patterns):
            found.setdefault(f.value, f)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(key, str) and isinstance(value, str):
                named = named_secret(key, value)
                if named is not None:
                    found.setdefault(named.value, named)
            _collect(value, patterns, found)
    elif isinstance(obj, list | tuple):
        for item in obj:
            _collect(item, patterns, found)


def _masked(obj: Any, literals: tuple[Matcher, ...]) -> Any:
    if isinstance(obj, str):
        return _replace(obj, literals)
    if isinstance(obj, dict):
        return {key: _masked(value, literals) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_masked(item, literals) for item in obj]
    return obj
