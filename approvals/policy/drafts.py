"""A policy sent over the API, kept for its author to apply in the console after a step-up.

A personal token carries no second factor, so applying a policy with one is
refused; the text is kept (in the shared cache, an hour, for that person
only) and the refusal names the console page that shows it and applies it.
"""

from __future__ import annotations

import secrets

from django.core.cache import cache

DRAFT_SECONDS = 3600


def keep(text: str, comment: str, user) -> str:
    """Keep ``text`` for ``user``; the key that finds it again."""
    key = secrets.token_urlsafe(16)
    cache.set(_cache_key(key), {"text": text, "comment": comment, "user": user.pk}, DRAFT_SECONDS)
    return key


def find(key: str, user) -> dict | None:
    """The draft ``key`` if ``user`` kept it and it has not expired."""
    if not key or len(key) > 64:
        return None
    draft = cache.get(_cache_key(key))
    return draft if draft and draft.get("user") == user.pk else None


def forget(key: str) -> None:
    cache.delete(_cache_key(key))


def _cache_key(key: str) -> str:
    return f"airlock:policy-draft:{key}"
