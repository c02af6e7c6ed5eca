"""What a valid upstream is, and every change to the list of upstreams, audited.

One validation for every way in: the console's form, a YAML file applied with
``manage.py upstreams apply FILE``. A file lists every upstream by name and
replaces the list whole; it is refused whole, naming each problem, before
anything is written::

    upstreams:
      github:
        command: [npx, -y, "@modelcontextprotocol/server-github"]
        env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}"}
        read: [/opt/mcp/github]       # what of the host its sandbox shows it, beside
        write: []                     # the system dirs, its installation and /work
        network: [api.github.com:443] # the hosts it may reach (through its proxy); none if absent
      fetch:
        image: mcp/fetch:latest       # a container of this image (its command, or `command`),
        network: [example.com:443]    # nothing of the host, and only what `network` lists
      crm:
        url: https://crm.example.com/mcp
        headers: {Authorization: "Bearer ${CRM_TOKEN}"}
        timeout_seconds: 30

The audit trail records each change with the names of the environment
variables and headers, never their values, and a fingerprint of the whole
configuration, so a changed secret shows as a change without being shown.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import yaml
from django.conf import settings
from django.db import transaction

from approvals.gateway.models import Upstream
from audit.services import record
from executions.sandboxes import EgressError, network_entry, overlaps

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token
MAX_TIMEOUT_SECONDS = 3600
MAX_NETWORK = 64
# An image reference as the engine takes it: [registry[:port]/]name[:tag][@digest].
IMAGE = re.compile(
    r"^([a-z0-9][a-z0-9.-]*(:[0-9]{1,5})?/)?[a-z0-9][a-z0-9._/-]{0,200}"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
FIELDS = (
    "image",
    "command",
    "env",
    "read",
    "write",
    "network",
    "url",
    "headers",
    "timeout_seconds",
    "enabled",
    "description",
)


class ConfigError(Exception):
    """An upstream (or a file of them) that cannot be saved; ``problems`` name each field."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Change:
    verb: str  # added, changed, removed
    name: str


def clean(name: object, data: object) -> dict:
    """The upstream ``name`` described by ``data``, as the row's fields; or ``ConfigError``."""
    named: list[str] = []
    if not isinstance(name, str) or not NAME.match(name):
        named.append(
            f"name {name!r}: lowercase letters, digits and '-', at most 40, starting with a "
            "letter or digit (tools show as <name>__<tool>)"
        )
    if not isinstance(data, dict):
        raise ConfigError(named + [f"{name}: a mapping of {', '.join(FIELDS)}"])
    problems: list[str] = []
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        problems.append(
            f"unknown field(s) {', '.join(map(str, unknown))}; known: {', '.join(FIELDS)}"
        )
    row = {
        "transport": "",
        "image": "",
        "command": [],
        "env": {},
        "read": [],
        "write": [],
        "network": [],
        "url": "",
        "headers": {},
        "timeout_seconds": 60,
        "enabled": True,
        "description": "",
    }
    has_image = data.get("image") not in (None, "")
    has_command = has_image or data.get("command") not in (None, [])
    has_url = data.get("url") not in (None, "")
    if has_command == has_url:
        problems.append(
            "give either command or image (a stdio server) or url (a streamable HTTP server)"
        )
    if has_command:
        row["transport"] = Upstream.Transport.STDIO
        if has_image:
            row["image"] = _image(data["image"], problems)
        if data.get("command") not in (None, []):
            row["command"] = _command(data["command"], problems)
        row["env"] = _mapping(data.get("env"), "env", ENV_NAME, problems)
        row["read"] = _paths(data.get("read"), "read", problems)
        row["write"] = _paths(data.get("write"), "write", problems)
        row["network"] = _network(data.get("network"), problems)
        if data.get("headers"):
            problems.append("headers: only for an upstream reached at a url")
        if has_image:
            for field in ("read", "write"):
                if data.get(field):
                    problems.append(
                        f"{field}: an upstream run from an image sees only its container, "
                        "not this host's paths (put what it needs in the image)"
                    )
    if has_url:
        row["transport"] = Upstream.Transport.HTTP
        row["url"] = _url(data["url"], problems)
        row["headers"] = _mapping(data.get("headers"), "headers", HEADER_NAME, problems)
        if data.get("env"):
            problems.append("env: only for an upstream started as a command or an image")
        if data.get("image"):
            problems.append("image: only for a stdio upstream, not one reached at a url")
        for field in ("read", "write", "network"):
            if data.get(field):
                problems.append(f"{field}: only for an upstream started as a command")
    timeout = data.get("timeout_seconds", 60)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int)
        or not 1 <= timeout <= MAX_TIMEOUT_SECONDS
    ):
        problems.append(
            f"timeout_seconds: a whole number of seconds from 1 to {MAX_TIMEOUT_SECONDS}"
        )
    else:
        row["timeout_seconds"] = timeout
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.append("enabled: true or false")
    else:
        row["enabled"] = enabled
    description = data.get("description", "") or ""
    if not isinstance(description, str) or len(description) > 300:
        problems.append("description: text of at most 300 characters")
    else:
        row["description"] = description
    if named or problems:
        raise ConfigError(named + [f"{name}: {problem}" for problem in problems])
    return row


def _command(value: object, problems: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(part, str) and part for part in value):
        problems.append("command: a list of non-empty strings, the program first")
        return []
    if any("\0" in part for part in value):
        problems.append("command: no NUL characters")
    return value


def _image(value: object, problems: list[str]) -> str:
    if not isinstance(value, str) or not IMAGE.match(value):
        problems.append(
            f"image: {value!r} is not an image reference (name[:tag][@sha256:…], lowercase)"
        )
        return ""
    return value


def _paths(value: object, field: str, problems: list[str]) -> list[str]:
    """Host paths a stdio upstream's sandbox shows it: absolute, and none of Airlock's own."""
    if value in (None, []):
        return []
    if not isinstance(value, list) or not all(isinstance(path, str) for path in value):
        problems.append(f"{field}: a list of absolute paths")
        return []
    for path in value:
        if not path.startswith("/") or "\0" in path or "\n" in path:
            problems.append(f"{field}: {path!r} is not an absolute path")
        elif what := hidden_in(path):
            problems.append(f"{field}: {path} would show the upstream {what}")
    return value


def _network(value: object, problems: list[str]) -> list[str]:
    """The host:port pairs a stdio upstream may connect to, as written (duplicates dropped)."""
    if value in (None, []):
        return []
    if not isinstance(value, list) or not value or len(value) > MAX_NETWORK:
        problems.append(f"network: a list of host:port entries (at most {MAX_NETWORK})")
        return []
    found = []
    for entry in value:
        try:
            text = str(network_entry(entry))
        except EgressError as exc:
            problems.append(f"network: {exc}")
            continue
        if text not in found:
            found.append(text)
    return found


def hidden_paths() -> list[tuple[str, str]]:
    """(what, path) of what no upstream may see: Airlock's data, database and keys."""
    found = [("Airlock's data dir", str(settings.DATA_DIR))]
    database = settings.DATABASES["default"]
    if "sqlite" in database["ENGINE"]:
        found.append(("Airlock's database", str(database["NAME"])))
    for name in ("AUDIT_SIGNING_KEY_FILE", "AUDIT_CHECKPOINT_FILE"):
        if getattr(settings, name, ""):
            found.append((f"Airlock's {name}", str(getattr(settings, name))))
    return [(what, os.path.realpath(path)) for what, path in found]


def hidden_in(path: str) -> str | None:
    """What of Airlock's own ``path`` is, holds or lies in; None when it is clear of them."""
    for what, hidden in hidden_paths():
        if overlaps(path, hidden):
            return f"{what} ({hidden})"
    return None


def _url(value: object, problems: list[str]) -> str:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        problems.append("url: an http:// or https:// URL")
        return ""
    if len(value) > 500:
        problems.append("url: at most 500 characters")
    return value


def _mapping(value: object, field: str, key: re.Pattern, problems: list[str]) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        problems.append(f"{field}: a mapping of names to text values")
        return {}
    bad = sorted(name for name in value if not isinstance(name, str) or not key.match(name))
    if bad:
        problems.append(f"{field}: invalid name(s) {', '.join(map(str, bad))}")
    if any("\n" in v or "\r" in v or "\0" in v for v in value.values()):
        problems.append(f"{field}: values must be one line")
    return value


def fingerprint(row: dict) -> str:
    """A hash of an upstream's whole configuration, secrets included, to tell changes apart."""
    shown = {field: row.get(field) for field in ("transport", *FIELDS)}
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:16]


def row_of(upstream: Upstream) -> dict:
    return {field: getattr(upstream, field) for field in ("transport", *FIELDS)}


def audit_data(name: str, row: dict) -> dict:
    """What the audit trail keeps of an upstream: no value of env or headers."""
    return {
        "name": name,
        "transport": row["transport"],
        "image": row.get("image", ""),
        "command": row["command"],
        "url": row["url"],
        "env_names": sorted(row["env"]),
        "read": row.get("read", []),
        "write": row.get("write", []),
        "network": row.get("network", []),
        "header_names": sorted(row["headers"]),
        "timeout_seconds": row["timeout_seconds"],
        "enabled": row["enabled"],
        "fingerprint": fingerprint(row),
    }


@transaction.atomic
def save(name: str, data: dict, actor: str, *, create: bool) -> Change | None:
    """Add upstream ``name`` (``create``) or change it; audited. ``None`` if nothing changed."""
    row = clean(name, data)
    upstream = Upstream.objects.select_for_update().filter(name=name).first()
    if create and upstream is not None:
        raise ConfigError([f"{name}: an upstream of that name exists"])
    if not create and upstream is None:
        raise ConfigError([f"{name}: no such upstream"])
    if upstream is not None and fingerprint(row_of(upstream)) == fingerprint(row):
        return None
    upstream, created = Upstream.objects.update_or_create(name=name, defaults=row)
    verb = "added" if created else "changed"
    record(actor, f"gateway.upstream_{verb}", upstream, **audit_data(name, row))
    return Change(verb, name)


@transaction.atomic
def remove(name: str, actor: str) -> Change:
    upstream = Upstream.objects.select_for_update().filter(name=name).first()
    if upstream is None:
        raise ConfigError([f"{name}: no such upstream"])
    record(actor, "gateway.upstream_removed", upstream, name=name)
    upstream.delete()
    return Change("removed", name)


def parse(text: str) -> dict[str, dict]:
    """A file's upstreams by name, once each is valid; ``ConfigError`` naming every problem."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"not YAML: {exc}"]) from None
    if document is None:
        document = {"upstreams": {}}
    if not isinstance(document, dict) or set(document) != {"upstreams"}:
        raise ConfigError(["the file is a mapping with one key, upstreams"])
    listed = document["upstreams"] or {}
    if not isinstance(listed, dict):
        raise ConfigError(["upstreams: a mapping of names to upstreams"])
    problems = []
    for name, data in listed.items():
        try:
            clean(name, data)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return listed


@transaction.atomic
def apply(text: str, actor: str) -> list[Change]:
    """Make the upstreams exactly those of the file ``text``; every change audited."""
    listed = parse(text)
    existing = set(Upstream.objects.values_list("name", flat=True))
    changes = [remove(name, actor) for name in existing if name not in listed]
    for name, data in listed.items():
        change = save(name, data, actor, create=name not in existing)
        if change is not None:
            changes.append(change)
    return changes


def export() -> str:
    """The upstreams as a file ``apply`` reads back to the same list (secrets as stored)."""
    listed = {}
    for upstream in Upstream.objects.all():
        row = row_of(upstream)
        shown = {field: row[field] for field in FIELDS if row[field] not in ("", [], {})}
        shown["timeout_seconds"], shown["enabled"] = row["timeout_seconds"], row["enabled"]
        listed[upstream.name] = shown
    return yaml.safe_dump({"upstreams": listed}, sort_keys=False, default_flow_style=None)
