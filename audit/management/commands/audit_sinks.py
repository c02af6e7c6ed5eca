from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from audit.shipping import ship


class Command(BaseCommand):
    help = "Each audit sink's position and lag (AUDIT_SINKS); --ship sends what they lack now."

    def add_arguments(self, parser):
        parser.add_argument("--ship", action="store_true", help="run a shipping pass first")

    def handle(self, *args, **options):
        try:
            if options["ship"]:
                ship.ship_all()
            found = ship.lags()
        except ImproperlyConfigured as error:
            raise CommandError(str(error)) from None
        if not found:
            self.stdout.write("no audit sinks (set AUDIT_SINKS)")
            return
        for lag in found:
            state = "up to date" if not lag.behind else f"{lag.behind} behind ({lag.seconds:.0f} s)"
            line = f"{lag.name}  at #{lag.seq} of #{lag.head}  {state}"
            if lag.last_error:
                line += f"  failing x{lag.failures}: {lag.last_error}"
            self.stdout.write(line)
