from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from django.apps import apps
        from django.db.models.signals import post_migrate

        # Sent per app with models (this one has none): after infrastructure's, the tables'.
        infrastructure = apps.get_app_config("infrastructure")
        post_migrate.connect(_cache_table, sender=infrastructure, dispatch_uid="console.cache")


def _cache_table(using, **kwargs) -> None:
    """The embedded deployment's shared cache lives in a table: made with the others, so that
    a command run before the first ``serve`` (a retention pass, a backup) finds it."""
    from django.core.management import call_command

    call_command("createcachetable", database=using, verbosity=0)
