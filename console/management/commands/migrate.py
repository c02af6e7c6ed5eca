"""Django's ``migrate``, refusing first a data dir that a commit would take along.

With ``SECRET_KEY`` and ``DATABASE_URL`` set, settings never touch the data dir;
``migrate`` still checks it, as ``serve`` does, before anything is written.
"""

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate

from console.environment import refuse_checkout


class Command(DjangoMigrate):
    def handle(self, *args, **options):
        try:
            refuse_checkout(Path(settings.DATA_DIR))
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        return super().handle(*args, **options)
