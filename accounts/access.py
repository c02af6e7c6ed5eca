"""View decorators for the console: who may open which page.

Anonymous visitors go to the login page; signed-in people without the right
role get a 403 (never a redirect loop back to the login they already passed).
Agents never have a browser session, so a bearer token is just anonymous here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

from .roles import is_admin, is_reviewer


def _role_required(check: Callable[[object], bool], message: str):
    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not check(request.user):
                raise PermissionDenied(message)
            # Whoever passed either check reviews: the shell needn't ask the database again.
            request.console_is_reviewer = True
            return view(request, *args, **kwargs)

        return login_required(wrapped)

    return decorator


reviewer_required = _role_required(is_reviewer, "only reviewers can use the console")
admin_required = _role_required(is_admin, "only admins can open this page")
