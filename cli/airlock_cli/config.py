"""Where a login is kept: ``$AIRLOCK_CONFIG``, else ``$XDG_CONFIG_HOME/airlock/config.json``
(``~/.config/airlock/config.json``), readable by its owner only (0600).

``AIRLOCK_URL`` and ``AIRLOCK_TOKEN`` in the environment win over the file:
a CI job needs no login, only its secret.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airlock_cli.client import NOT_LOGGED_IN, CliError


def path() -> Path:
    explicit = os.environ.get("AIRLOCK_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "airlock" / "config.json"


def save(url: str, token: str, principal: str) -> Path:
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Made 0600 before the token is written: never readable by others, not even for a moment.
    fd = os.open(target.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": url.rstrip("/"), "token": token, "principal": principal}, out)
    os.chmod(target.with_suffix(".tmp"), 0o600)
    os.replace(target.with_suffix(".tmp"), target)
    return target


def load() -> dict:
    """``{"url", "token"}``; ``CliError`` that says how to log in when there is none."""
    url, token = os.environ.get("AIRLOCK_URL"), os.environ.get("AIRLOCK_TOKEN")
    stored: dict = {}
    try:
        stored = json.loads(path().read_text())
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise CliError(NOT_LOGGED_IN, f"cannot read {path()}: {exc}; log in again") from None
    url, token = url or stored.get("url"), token or stored.get("token")
    if not url or not token:
        raise CliError(
            NOT_LOGGED_IN,
            "not logged in: run `airlock login URL` (or set AIRLOCK_URL and AIRLOCK_TOKEN)",
        )
    return {"url": url, "token": token, "principal": stored.get("principal", "")}


def forget() -> bool:
    try:
        path().unlink()
        return True
    except FileNotFoundError:
        return False
