from django.apps import AppConfig
from django.core import checks


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self) -> None:
        from . import tasks  # noqa: F401 - registers the periodic tasks

        checks.register(check_shipping_and_signing)


def check_shipping_and_signing(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """A sink or a signing key that cannot work is said at start-up, not at the first pass."""
    from django.core.exceptions import ImproperlyConfigured

    from .checkpoints import CheckpointError, signing_key
    from .shipping.ship import configured

    found = []
    try:
        configured()
    except ImproperlyConfigured as error:
        found.append(checks.Error(str(error), id="audit.E001"))
    try:
        signing_key()
    except CheckpointError as error:
        found.append(checks.Error(str(error), id="audit.E002"))
    return found
