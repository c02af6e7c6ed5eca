"""Credentials in what agents send and runs print: found, masked, and the originals sealed.

Owns what a credential looks like and its masked form (``shapes``: the high-signal
shapes, a private key's block, ``mask``), finding them (``finding``: detect-secrets'
plugins called directly, an admin's patterns), masking a text or a JSON-able object
(``masking``), masking output as it streams, chunk by chunk and at its speed
(``stream``: ``OutputMasker``), and sealing originals at rest (``sealing``: Fernet under
``settings.CREDENTIALS_KEY``, by default derived from the secret key).

May import Django, detect-secrets and cryptography only.
"""

from typing import TYPE_CHECKING

from .sealing import CredentialsKeyError, seal, unseal
from .shapes import mask
from .stream import OutputMasker

if TYPE_CHECKING:
    from .finding import Found, find
    from .masking import mask_json, mask_text

# Finding loads detect-secrets (0.2-0.4 s): only what searches text pays for it, never a
# process that only masks streams or unseals.
_LAZY = {"Found": "finding", "find": "finding", "mask_json": "masking", "mask_text": "masking"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CredentialsKeyError",
    "Found",
    "OutputMasker",
    "find",
    "mask",
    "mask_json",
    "mask_text",
    "seal",
    "unseal",
]
