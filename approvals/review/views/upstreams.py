"""The admins' MCP gateway page: the upstream servers, added, changed and removed, audited.

The form takes a command line (split as a shell would, without running one),
an image (run as a container, optionally with that command) or a URL, and ``NAME=value`` / ``Name: value`` lines for the environment or
headers. Values are never shown again: the list shows names, and an edit
form shows each literal value as ``********``, which keeps the stored value
when saved unchanged (``${NAME}`` references, which are no secret, show as
they are). Every change goes through ``approvals.gateway.config``, as a file
applied with ``manage.py upstreams apply`` does.
"""

from __future__ import annotations

import shlex

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.access import admin_required
from accounts.stepup import fresh_factor_required
from approvals.gateway import config, connections
from approvals.gateway.models import Upstream
from audit.services import actor_label

HIDDEN = "********"


class UpstreamForm(forms.Form):
    name = forms.CharField(
        max_length=40, help_text="Lowercase letters, digits and '-'; tools show as name__tool."
    )
    command = forms.CharField(
        required=False,
        max_length=2000,
        help_text="A stdio server: the command line that starts it (split as a shell would).",
    )
    image = forms.CharField(
        required=False,
        max_length=300,
        help_text="Or run it as a container of this image (the command, if given, replaces "
        "the image's): nothing of this host, and the network below only.",
    )
    read = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="May read",
        help_text="For a command: host paths its sandbox shows it read-only, one per line "
        "(besides the system dirs and its own installation).",
    )
    write = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="May write",
        help_text="For a command: host paths it may write, one per line.",
    )
    network = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="May connect to",
        help_text="For a command or an image: host:port it may reach, one per line "
        "(api.github.com:443; "
        "*.example.com:443 for any name under it), through a proxy of its own. None: no network.",
    )
    url = forms.CharField(
        required=False, max_length=500, label="URL", help_text="Or a streamable HTTP server."
    )
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Environment",
        help_text="For a command: NAME=value per line; ${NAME} reads Airlock's environment.",
    )
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="For a URL: Name: value per line; ${NAME} reads Airlock's environment.",
    )
    timeout_seconds = forms.IntegerField(initial=60, label="Timeout (s)")
    enabled = forms.BooleanField(required=False, initial=True)
    description = forms.CharField(required=False, max_length=300)

    def __init__(self, *args, stored: Upstream | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stored = stored
        if stored is not None:
            self.fields["name"].disabled = True

    def as_config(self) -> tuple[str, dict]:
        """The upstream's name and its data as ``config.clean`` takes it; ``ConfigError``."""
        data, problems = self.cleaned_data, []
        try:
            command = shlex.split(data["command"])
        except ValueError as exc:
            problems.append(f"command: {exc}")
            command = []
        env = _lines(data["env"], "=", "env", problems)
        headers = _lines(data["headers"], ":", "headers", problems)
        if problems:
            raise config.ConfigError(problems)
        if self.stored is not None:  # a value left hidden keeps the stored one
            env = {k: self.stored.env.get(k, v) if v == HIDDEN else v for k, v in env.items()}
            headers = {
                k: self.stored.headers.get(k, v) if v == HIDDEN else v for k, v in headers.items()
            }
        return data["name"], {
            "image": data["image"].strip(),
            "command": command,
            "url": data["url"].strip(),
            "env": env,
            "read": _paths(data["read"]),
            "write": _paths(data["write"]),
            "network": _paths(data["network"]),
            "headers": headers,
            "timeout_seconds": data["timeout_seconds"],
            "enabled": data["enabled"],
            "description": data["description"],
        }


def _lines(text: str, separator: str, field: str, problems: list[str]) -> dict[str, str]:
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, said, value = line.partition(separator)
        if not said or not name.strip():
            problems.append(f"{field}: line {number} is not name{separator}value")
            continue
        found[name.strip()] = value.strip()
    return found


def _paths(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _shown(values: dict[str, str], separator: str) -> str:
    def one(value: str) -> str:
        return value if config.REFERENCE.fullmatch(value) else HIDDEN

    return "\n".join(f"{name}{separator}{one(value)}" for name, value in values.items())


def _initial(upstream: Upstream) -> dict:
    return {
        "name": upstream.name,
        "command": shlex.join(upstream.command),
        "image": upstream.image,
        "url": upstream.url,
        "env": _shown(upstream.env, "="),
        "read": "\n".join(upstream.read),
        "write": "\n".join(upstream.write),
        "network": "\n".join(upstream.network),
        "headers": _shown(upstream.headers, ": "),
        "timeout_seconds": upstream.timeout_seconds,
        "enabled": upstream.enabled,
        "description": upstream.description,
    }


@admin_required
@fresh_factor_required(purpose="Change the MCP gateway's upstream servers")
def upstreams(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """The upstreams, and the form that adds one (or, with ``name``, changes it)."""
    stored = get_object_or_404(Upstream, name=name) if name else None
    initial = _initial(stored) if stored is not None else None
    form = UpstreamForm(request.POST or None, initial=initial, stored=stored)
    if request.method == "POST" and form.is_valid():
        try:
            upstream, data = form.as_config()
            change = config.save(upstream, data, actor_label(request.user), create=stored is None)
        except config.ConfigError as exc:
            for problem in exc.problems:
                form.add_error(None, problem)
        else:
            messages.success(
                request, f"Upstream {upstream} {change.verb}." if change else "Nothing changed."
            )
            return redirect(reverse("console:upstreams") + f"#upstream-{upstream}")
    context = {"form": form, "editing": stored, "upstreams": Upstream.objects.all()}
    status = 400 if form.errors else 200
    return render(request, "approvals/upstreams.html", context, status=status)


@require_POST
@admin_required
@fresh_factor_required(
    then=lambda request, name, operation: reverse("console:upstreams"),
    purpose="Change the MCP gateway's upstream servers",
)
def upstream_action(request: HttpRequest, name: str, operation: str) -> HttpResponse:
    upstream = get_object_or_404(Upstream, name=name)
    if operation == "remove":
        config.remove(upstream.name, actor_label(request.user))
        messages.success(request, f"Upstream {name} removed; its tools are gone from /mcp.")
    elif operation == "check":
        try:
            tools = connections.check(connections.target_of(upstream))
        except connections.UpstreamDown as exc:
            messages.error(request, exc.message)
        else:
            names = ", ".join(tools) or "none"
            messages.success(
                request, f"Upstream {name} answered with {len(tools)} tool(s): {names}."
            )
    else:
        return HttpResponse(status=404)
    return redirect(reverse("console:upstreams") + f"#upstream-{name}")
