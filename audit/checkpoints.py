"""Anchored checkpoints: the chain's head signed with an Ed25519 key the database never holds.

The chain's HMAC catches an edited, inserted or deleted row, but whoever holds
the database and its key can recompute the whole chain from the first row
changed. A checkpoint names the head at a moment (sequence number, hash, time)
and is signed with a key that lives only with the signer
(``AUDIT_SIGNING_KEY_FILE`` or ``AUDIT_SIGNING_KEY``); each one is appended to
the checkpoint file, stored for the sinks and shipped to them after the record
it names. ``verify`` proves that the chain up to every checkpoint is the one
that was signed: a rewrite changes the hash at the checkpoint's row, a
truncation removes the row, and a forged checkpoint fails its signature.

What is signed is plain text, so that anyone with the public key checks a
checkpoint with any Ed25519 tool (``openssl pkeyutl``)::

    airlock audit checkpoint v1\\n<seq>\\n<hash>\\n<at>\\n
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.utils import timezone

from .models import AuditEvent, Checkpoint
from .services import chain_end

VERSION = 1


class CheckpointError(Exception):
    """A key or a checkpoint file that cannot be used; the message says why."""


def message(seq: int, hash: str, at: str) -> bytes:
    """The exact bytes a checkpoint's signature covers."""
    return f"airlock audit checkpoint v{VERSION}\n{seq}\n{hash}\n{at}\n".encode()


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def new_key(path: Path) -> Ed25519PublicKey:
    """Write a new private key to ``path`` (PEM, 0600, never over an existing file)."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CheckpointError(f"{path} exists: a signing key is never overwritten") from None
    except OSError as error:
        raise CheckpointError(f"cannot write {path}: {error.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return private.public_key()


def signing_key() -> Ed25519PrivateKey | None:
    """The configured private key, or None when this process signs nothing."""
    path = getattr(settings, "AUDIT_SIGNING_KEY_FILE", "")
    if path:
        return signing_key_from(Path(path))
    pem = getattr(settings, "AUDIT_SIGNING_KEY", "")
    return _private_key(pem, "AUDIT_SIGNING_KEY") if pem else None


def required_signing_key() -> Ed25519PrivateKey:
    """The configured private key; ``CheckpointError`` saying how to make one when there is none."""
    private = signing_key()
    if private is None:
        raise CheckpointError(
            "no signing key: set AUDIT_SIGNING_KEY_FILE (manage.py audit_checkpoint --new-key PATH)"
        )
    return private


def signing_key_from(path: Path) -> Ed25519PrivateKey:
    try:
        pem = path.read_text()
    except OSError as error:
        raise CheckpointError(f"cannot read the signing key {path}: {error.strerror}") from None
    return _private_key(pem, str(path))


def _private_key(pem: str, where: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{where} is not a PEM private key: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"{where} is not an Ed25519 key")
    return key


def load_public_key(text: str) -> Ed25519PublicKey:
    """A public key from PEM text, a PEM file's path, or its raw 32 bytes in base64."""
    source = text
    if not text.lstrip().startswith("-----") and Path(text).is_file():
        source = Path(text).read_text()
    try:
        if source.lstrip().startswith("-----"):
            key = serialization.load_pem_public_key(source.encode())
        else:
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(source, validate=True))
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"not an Ed25519 public key: {error}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError("not an Ed25519 public key")
    return key


def as_entry(checkpoint: Checkpoint) -> dict:
    """A checkpoint as the file and the sinks carry it."""
    return {
        "type": "checkpoint",
        "version": VERSION,
        "seq": checkpoint.seq,
        "hash": checkpoint.hash,
        "at": checkpoint.created_at.isoformat(),
        "key_id": checkpoint.key_id,
        "signature": checkpoint.signature,
    }


def sign_head(private: Ed25519PrivateKey | None = None) -> Checkpoint | None:
    """Sign the chain's head now; None when the chain is empty or already signed at its head.

    Stored (the sinks receive it after the record it names) and appended to
    ``AUDIT_CHECKPOINT_FILE``. Raises ``CheckpointError`` without a key.
    """
    private = private or required_signing_key()
    seq, hash = head = chain_end()
    if not seq:
        return None
    if Checkpoint.objects.order_by("-pk").values_list("seq", "hash").first() == head:
        return None
    created_at = timezone.now()
    signature = private.sign(message(seq, hash, created_at.isoformat()))
    checkpoint = Checkpoint.objects.create(
        seq=seq,
        hash=hash,
        created_at=created_at,
        key_id=key_id(private.public_key()),
        signature=base64.b64encode(signature).decode(),
    )
    path = Path(settings.AUDIT_CHECKPOINT_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(as_entry(checkpoint), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return checkpoint


@dataclass(frozen=True)
class CheckpointReport:
    ok: bool
    checked: int
    problem: str = ""


def read_file(path: Path) -> list[dict]:
    """The checkpoints in a file: the checkpoint file, or a sink's JSON lines (others skipped)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror}") from None
    found = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            raise CheckpointError(f"{path}:{number} is not JSON") from None
        entry = entry.get("event", entry) if isinstance(entry, dict) else entry
        if isinstance(entry, dict) and entry.get("type") == "checkpoint":
            found.append(entry)
    return found


def verify(
    checkpoints: Iterable[dict],
    public: Ed25519PublicKey,
    hash_at: Callable[[int], str | None],
) -> CheckpointReport:
    """Check each checkpoint's signature, then that the chain holds its hash at its row.

    ``hash_at(seq)`` is the chain's stored hash of row ``seq`` (None when
    there is no such row). The chain's own links and HMACs are checked
    apart (``services.verify_chain``): together they prove every row up to
    the last checkpoint is the one that was signed.
    """
    checked = 0
    for entry in checkpoints:
        try:
            seq, hash, at = int(entry["seq"]), str(entry["hash"]), str(entry["at"])
            signature = base64.b64decode(entry["signature"], validate=True)
            datetime.fromisoformat(at)
        except (KeyError, TypeError, ValueError):
            return CheckpointReport(False, checked, f"checkpoint {checked + 1} is malformed")
        try:
            public.verify(signature, message(seq, hash, at))
        except InvalidSignature:
            return CheckpointReport(
                False,
                checked,
                f"checkpoint at row {seq} ({at}) is not signed by this key: forged or altered",
            )
        stored = hash_at(seq)
        if stored is None:
            return CheckpointReport(
                False, checked, f"row {seq}, signed at {at}, is gone: the chain was cut short"
            )
        if stored != hash:
            return CheckpointReport(
                False,
                checked,
                f"row {seq} is not the one signed at {at}: the chain was rewritten up to it",
            )
        checked += 1
    return CheckpointReport(True, checked)


def database_hash_at(seq: int) -> str | None:
    return AuditEvent.objects.filter(seq=seq).values_list("hash", flat=True).first()
