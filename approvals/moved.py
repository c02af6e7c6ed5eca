"""Classes that settings name by dotted path, found under the paths they had before, too.

``NOTIFIERS``, ``RISK_SCORERS`` and ``PREVALIDATOR_CLASS`` name classes of
this app. Their modules moved when the app was split into one package per
concern; an install whose settings still say the old path keeps working.
"""

from __future__ import annotations

from django.utils.module_loading import import_string

MOVED = {
    "approvals.notifications.ConsoleNotifier": "approvals.notify.console.ConsoleNotifier",
    "approvals.notifications.EmailNotifier": "approvals.notify.email.EmailNotifier",
    "approvals.notifications.WebhookNotifier": "approvals.notify.webhooks.WebhookNotifier",
}
MOVED_PACKAGES = {
    "approvals.slack.": "approvals.notify.slack.",
    "approvals.risk.": "approvals.policy.risk.",
    "approvals.prevalidators.": "approvals.policy.prevalidators.",
}


def current_path(path: str) -> str:
    """Where the class at dotted ``path`` lives now."""
    if path in MOVED:
        return MOVED[path]
    for old, new in MOVED_PACKAGES.items():
        if path.startswith(old):
            return new + path[len(old) :]
    return path


def import_class(path: str):
    """``import_string`` of ``path``, or of where it moved."""
    return import_string(current_path(path))
