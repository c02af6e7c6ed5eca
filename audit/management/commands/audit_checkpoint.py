from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit import checkpoints


class Command(BaseCommand):
    help = (
        "Sign the audit chain's head now with AUDIT_SIGNING_KEY(_FILE), append it to "
        "AUDIT_CHECKPOINT_FILE and queue it for the sinks; or make a new signing key."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--new-key",
            metavar="PATH",
            help="write a new Ed25519 private key there (0600) and print its public key",
        )
        parser.add_argument(
            "--public-key",
            action="store_true",
            help="print the public key of the configured signing key, for auditors",
        )

    def handle(self, *args, **options):
        try:
            if options["new_key"]:
                public = checkpoints.new_key(Path(options["new_key"]))
                self.stdout.write(checkpoints.public_pem(public), ending="")
                self.stderr.write(
                    f"key {checkpoints.key_id(public)} written to {options['new_key']}; "
                    "set AUDIT_SIGNING_KEY_FILE to it where the workers run, and give the "
                    "public key above to whoever verifies"
                )
                return
            private = checkpoints.required_signing_key()
            if options["public_key"]:
                self.stdout.write(checkpoints.public_pem(private.public_key()), ending="")
                return
            made = checkpoints.sign_head(private)
        except checkpoints.CheckpointError as error:
            raise CommandError(str(error)) from None
        if made is None:
            self.stdout.write("nothing to sign: the chain is empty or its head is signed already")
            return
        self.stdout.write(
            f"signed row {made.seq} ({made.created_at.isoformat()}) with key {made.key_id}; "
            f"appended to {settings.AUDIT_CHECKPOINT_FILE}"
        )
