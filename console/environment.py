"""Reading settings from the environment: typed values, refused at start-up when malformed.

``console.settings`` reads every variable through these (and documents each
where it reads it); the data directory and the key an embedded install keeps
in it are made here. Imports nothing of Airlock but ``dockergate.targets`` (its rule lists).
"""

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from dockergate.targets import BadRules, Targets

LEGACY_DEVELOPMENT_KEY = "airlock-development-key-change-me"


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is above the maximum {maximum}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value


def private_data_dir(path: Path) -> Path:
    """The data dir, created readable by this user alone (0700)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def secret_key_file(data_dir: Path) -> str:
    """The key of this install, kept in ``DATA_DIR/secret_key`` (0600); made once.

    An install whose database predates the file keeps the key it has been using
    (its audit chain is keyed with it); a new one gets a random key.
    """
    path = private_data_dir(data_dir) / "secret_key"
    if not path.exists():
        key = LEGACY_DEVELOPMENT_KEY
        if not (data_dir / "airlock.sqlite3").exists():
            key = secrets.token_urlsafe(48)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process of this install made it first
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(key)
    return path.read_text().strip()


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_targets(name: str, default: str) -> Targets:
    """A ``dockergate.targets`` rule list; a rule that does not parse stops start-up."""
    try:
        return Targets.parse(env(name, default))
    except BadRules as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
