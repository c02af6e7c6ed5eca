import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit import checkpoints
from audit.services import verify_chain


class Command(BaseCommand):
    help = (
        "Verify the audit trail's hash chain; exit 1 at the first edited, inserted or deleted row. "
        "With --checkpoints, also prove the chain up to each signed checkpoint is the one signed."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--checkpoints",
            metavar="FILE",
            help="signed checkpoints: the checkpoint file, or JSON lines a sink received",
        )
        parser.add_argument(
            "--public-key",
            metavar="KEY",
            help="the signer's Ed25519 public key (PEM file or text, or base64); default: the "
            "public half of AUDIT_SIGNING_KEY(_FILE)",
        )

    def handle(self, *args, **options):
        # A long chain is checked by a process per core (verify_chain's stretches).
        report = verify_chain(workers=os.cpu_count() or 1)
        if not report.ok:
            raise CommandError(
                f"audit chain broken at row {report.first_bad_seq}: {report.problem} "
                f"({report.checked} rows verified before it)"
            )
        self.stdout.write(f"audit chain intact: {report.checked} rows verified")
        if options["checkpoints"]:
            self._checkpoints(Path(options["checkpoints"]), options["public_key"])

    def _checkpoints(self, path: Path, public_key: str | None) -> None:
        try:
            if public_key:
                public = checkpoints.load_public_key(public_key)
            else:
                private = checkpoints.signing_key()
                if private is None:
                    raise CommandError(
                        "--public-key is needed: no AUDIT_SIGNING_KEY(_FILE) here to take it from"
                    )
                public = private.public_key()
            found = checkpoints.read_file(path)
        except checkpoints.CheckpointError as error:
            raise CommandError(str(error)) from None
        if not found:
            raise CommandError(f"{path} holds no checkpoint")
        report = checkpoints.verify(found, public, checkpoints.database_hash_at)
        if not report.ok:
            raise CommandError(
                f"checkpoints: {report.problem} ({report.checked} checkpoints verified before it)"
            )
        last = found[-1]
        self.stdout.write(
            f"checkpoints hold: {report.checked} signed by key {checkpoints.key_id(public)}, "
            f"the last at row {last['seq']} ({last['at']})"
        )
