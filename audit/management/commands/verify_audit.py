import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit import archive, checkpoints
from audit.models import ChainArchive
from audit.services import verify_chain
from infrastructure.archive import Archive, ArchiveError
from infrastructure.archive.store import StoreError


class Command(BaseCommand):
    help = (
        "Verify the audit trail's hash chain; exit 1 at the first edited, inserted or deleted row. "
        "With --checkpoints, also prove the chain up to each signed checkpoint is the one signed."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--archive",
            nargs="?",
            const="",
            metavar="LOCATION",
            help="also check the records moved to the archive (default: RETENTION_ARCHIVE), "
            "from the first to where the database goes on",
        )
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
        through, _ = archive.archived_through()
        store = None
        if options["archive"] is not None:
            store = self._archive(options["archive"] or settings.RETENTION_ARCHIVE)
        elif through:
            location = ChainArchive.objects.values_list("location", flat=True).first()
            self.stdout.write(
                f"rows 1–{through} were moved to the archive ({location}): not checked here "
                "(--archive checks them)"
            )
        if options["checkpoints"]:
            self._checkpoints(Path(options["checkpoints"]), options["public_key"], store)

    def _archive(self, location: str) -> Archive:
        try:
            store = Archive(location)
            report = archive.verify_archived(store)
        except (ArchiveError, StoreError) as error:
            raise CommandError(f"archive: {error}") from None
        if not report.ok:
            raise CommandError(
                f"audit chain broken in the archive at row {report.first_bad_seq}: "
                f"{report.problem} ({report.checked} archived rows verified before it)"
            )
        if not report.checked:
            self.stdout.write(f"no records have been moved to the archive ({store.location})")
        else:
            self.stdout.write(
                f"archived rows intact: {report.checked} rows in {store.location}, the "
                "database goes on from the last"
            )
        return store

    def _checkpoints(self, path: Path, public_key: str | None, store: Archive | None) -> None:
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
        hash_at = checkpoints.database_hash_at
        through, _ = archive.archived_through()
        older = {seq for seq in map(_seq_of, found) if 0 < seq <= through}
        if older and store is None:
            raise CommandError(
                f"{len(older)} checkpoint(s) name rows moved to the archive: pass --archive"
            )
        if older:
            archived = archive.archived_hashes(store, older)

            def hash_at(seq: int) -> str | None:
                return archived.get(seq) if seq <= through else checkpoints.database_hash_at(seq)

        report = checkpoints.verify(found, public, hash_at)
        if not report.ok:
            raise CommandError(
                f"checkpoints: {report.problem} ({report.checked} checkpoints verified before it)"
            )
        last = found[-1]
        self.stdout.write(
            f"checkpoints hold: {report.checked} signed by key {checkpoints.key_id(public)}, "
            f"the last at row {last['seq']} ({last['at']})"
        )


def _seq_of(entry: dict) -> int:
    try:
        return int(entry["seq"])
    except (KeyError, TypeError, ValueError):
        return 0  # malformed: checkpoints.verify names it
