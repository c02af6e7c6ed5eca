"""Originals sealed at rest: JSON encrypted with Fernet, under a key the database does not hold.

The key is ``settings.CREDENTIALS_KEY``: ``AIRLOCK_CREDENTIALS_KEY`` when set, else one
derived from the install's secret key (``console.environment.derived_key``: HKDF, a
label of its own), so it
is kept as the secret key is, and every host of a deployment that shares that shares it. Several keys separated by commas rotate it: the first seals,
any of them unseals. A token sealed under a key no longer among them cannot be read:
``unseal`` says so (``CredentialsKeyError``) rather than returning nothing.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

WHERE = "settings.CREDENTIALS_KEY (AIRLOCK_CREDENTIALS_KEY, or derived from SECRET_KEY)"


class CredentialsKeyError(Exception):
    """The credentials key is missing or malformed, or did not seal what is to be unsealed."""


def seal(obj: Any) -> str:
    """``obj`` (JSON-able) as a token only the credentials key opens."""
    plain = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return _fernet().encrypt(plain).decode("ascii")


def unseal(token: str) -> Any:
    """What ``seal`` was given; ``CredentialsKeyError`` if another key sealed it."""
    try:
        plain = _fernet().decrypt(token.encode("ascii"))
    except (InvalidToken, UnicodeEncodeError):
        raise CredentialsKeyError(
            f"cannot unseal: sealed under a key that is not in {WHERE}, or damaged"
        ) from None
    return json.loads(plain)


def _fernet() -> MultiFernet:
    keys = getattr(settings, "CREDENTIALS_KEY", "")
    if not keys:
        raise CredentialsKeyError(f"no credentials key: set {WHERE}")
    return _fernet_for(keys)


@lru_cache(maxsize=4)
def _fernet_for(keys: str) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key.strip()) for key in keys.split(",") if key.strip()])
    except ValueError:
        raise CredentialsKeyError(
            f"{WHERE} is not a Fernet key (32 url-safe base64-encoded bytes; "
            "make one with cryptography.fernet.Fernet.generate_key())"
        ) from None
