"""Signed checkpoints catch what the chain alone cannot: a rewrite by someone holding its key.

The attacker here holds the database and the key the chain is keyed with
(SECRET_KEY), and recomputes every row from the first one changed: the chain
verifies, the checkpoints signed with a key kept elsewhere do not.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess

import pytest
from celery import current_app
from django.core.management import CommandError, call_command
from django.db import transaction

from audit import checkpoints
from audit.models import AuditEvent, Checkpoint
from audit.services import _digest, record, verify_chain
from tests.support import require

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def signer(tmp_path, settings):
    """A signing key of its own, its public half in a PEM file, and the checkpoint file."""
    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "signing.pem")
    settings.AUDIT_CHECKPOINT_FILE = str(tmp_path / "checkpoints.jsonl")
    public = checkpoints.new_key(tmp_path / "signing.pem")
    (tmp_path / "public.pem").write_text(checkpoints.public_pem(public))
    return tmp_path


def add_records(count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        with transaction.atomic():
            record("system", "test.event", None, n=n)


def verify(signer, *extra: str) -> str:
    call_command(
        "verify_audit",
        "--checkpoints",
        str(signer / "checkpoints.jsonl"),
        "--public-key",
        str(signer / "public.pem"),
        *extra,
    )


def rewrite_from(seq: int, **data) -> None:
    """What an attacker with the database and SECRET_KEY can do: change a row, recompute the rest."""
    prev = AuditEvent.objects.get(seq=seq - 1).hash if seq > 1 else "0" * 64
    for event in AuditEvent.objects.filter(seq__gte=seq).order_by("seq"):
        if event.seq == seq:
            event.data = data
        event.prev_hash = prev
        event.hash = _digest(
            prev,
            event.seq,
            event.created_at,
            event.actor,
            event.verb,
            event.object_type,
            event.object_id,
            event.data,
        )
        event.save(update_fields=["data", "prev_hash", "hash"])
        prev = event.hash


def test_an_untouched_chain_holds_against_every_checkpoint(signer, capsys):
    add_records(5)
    call_command("audit_checkpoint")
    add_records(3, start=5)
    call_command("audit_checkpoint")
    call_command("audit_checkpoint")  # the head is signed already: nothing new
    lines = (signer / "checkpoints.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [5, 8]
    verify(signer)
    out = capsys.readouterr().out
    assert "checkpoints hold: 2 signed by key" in out and "the last at row 8" in out


def test_a_whole_chain_rewrite_with_the_databases_key_is_caught(signer):
    add_records(10)
    call_command("audit_checkpoint")
    rewrite_from(3, n="nothing happened here")
    assert verify_chain().ok  # the chain alone cannot tell
    with pytest.raises(CommandError, match="row 10 is not the one signed at .*rewritten"):
        verify(signer)


def test_cutting_the_chain_short_is_caught(signer):
    add_records(6)
    call_command("audit_checkpoint")
    AuditEvent.objects.filter(seq__gte=5).delete()
    assert verify_chain().ok
    with pytest.raises(CommandError, match="row 6, signed at .* is gone"):
        verify(signer)


def test_a_forged_or_foreign_checkpoint_is_refused(signer, tmp_path):
    add_records(4)
    call_command("audit_checkpoint")
    rewrite_from(2, n="forged")
    path = signer / "checkpoints.jsonl"
    entry = json.loads(path.read_text())
    # The attacker puts the rewritten head in the file, but cannot sign it.
    path.write_text(json.dumps({**entry, "hash": AuditEvent.objects.get(seq=4).hash}) + "\n")
    with pytest.raises(CommandError, match="not signed by this key: forged or altered"):
        verify(signer)
    # Nor can a key of their own stand in for the auditor's.
    own = checkpoints.new_key(tmp_path / "mallory.pem")
    forged = {
        **entry,
        "hash": AuditEvent.objects.get(seq=4).hash,
        "signature": base64.b64encode(
            checkpoints.signing_key_from(tmp_path / "mallory.pem").sign(
                checkpoints.message(4, AuditEvent.objects.get(seq=4).hash, entry["at"])
            )
        ).decode(),
        "key_id": checkpoints.key_id(own),
    }
    path.write_text(json.dumps(forged) + "\n")
    with pytest.raises(CommandError, match="not signed by this key"):
        verify(signer)


def test_an_auditor_checks_a_checkpoint_with_openssl_and_the_public_key_alone(signer):
    require(shutil.which("openssl") is not None, "openssl is not installed")
    add_records(3)
    call_command("audit_checkpoint")
    entry = json.loads((signer / "checkpoints.jsonl").read_text())
    (signer / "message").write_bytes(
        f"airlock audit checkpoint v1\n{entry['seq']}\n{entry['hash']}\n{entry['at']}\n".encode()
    )
    (signer / "signature").write_bytes(base64.b64decode(entry["signature"]))

    def openssl_verifies() -> bool:
        return (
            subprocess.run(
                ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", "public.pem", "-rawin"]
                + ["-in", "message", "-sigfile", "signature"],
                cwd=signer,
                capture_output=True,
            ).returncode
            == 0
        )

    assert openssl_verifies()
    (signer / "message").write_bytes((signer / "message").read_bytes().replace(b"\n3\n", b"\n4\n"))
    assert not openssl_verifies()


def test_checkpoints_read_from_what_a_sink_received(signer):
    add_records(3)
    call_command("audit_checkpoint")
    checkpoint = Checkpoint.objects.get()
    # As a HEC receiver keeps them: events wrapped, records and checkpoints mixed.
    received = signer / "received.jsonl"
    lines = [{"event": {"type": "audit", "seq": n}, "sourcetype": "airlock:audit"} for n in (1, 2)]
    lines.append({"event": checkpoints.as_entry(checkpoint), "sourcetype": "airlock:checkpoint"})
    received.write_text("".join(json.dumps(line) + "\n" for line in lines))
    call_command(
        "verify_audit",
        "--checkpoints",
        str(received),
        "--public-key",
        base64.b64encode(
            checkpoints.load_public_key(str(signer / "public.pem")).public_bytes_raw()
        ).decode(),
    )


def test_without_a_key_nothing_is_signed_and_the_commands_say_what_to_do(tmp_path, settings):
    settings.AUDIT_SIGNING_KEY_FILE = settings.AUDIT_SIGNING_KEY = ""
    add_records(2)
    current_app.tasks["audit.tasks.checkpoint"].apply()
    assert not Checkpoint.objects.exists()
    with pytest.raises(CommandError, match="no signing key: set AUDIT_SIGNING_KEY_FILE"):
        call_command("audit_checkpoint")
    (tmp_path / "c.jsonl").write_text("")
    with pytest.raises(CommandError, match="--public-key is needed"):
        call_command("verify_audit", "--checkpoints", str(tmp_path / "c.jsonl"))


def test_the_periodic_task_signs_with_the_workers_key(signer):
    add_records(2)
    current_app.tasks["audit.tasks.checkpoint"].apply()
    assert Checkpoint.objects.get().seq == 2


def test_a_key_is_never_overwritten_and_a_bad_one_is_named(signer, settings):
    with pytest.raises(checkpoints.CheckpointError, match="never overwritten"):
        checkpoints.new_key(signer / "signing.pem")
    (signer / "rsa.pem").write_text(
        "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"
    )
    settings.AUDIT_SIGNING_KEY_FILE = str(signer / "rsa.pem")
    with pytest.raises(checkpoints.CheckpointError, match="is not a PEM private key"):
        checkpoints.signing_key()
    with pytest.raises(CommandError, match="not an Ed25519 public key"):
        call_command("verify_audit", "--checkpoints", "x", "--public-key", "AAAA")
