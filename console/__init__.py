"""The project package: settings, URLs, the ASGI and Celery apps, ``serve``, the console's shell.

Owns no business logic and no shared infrastructure: it wires the apps
together (``settings``, read from the environment through ``environment``, ``urls``, ``console_urls``, ``asgi``, ``routing``,
``celery``), serves the embedded deployment (``management/commands/serve``)
with its demo cast (``demo``), and renders the console's shell, its own
pages (users, audit trail, errors), the audit trail's API for admins'
tools (``audit_api``) and operators' probes (``health``). It
sits on top: it may import every app, and no app imports it.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
