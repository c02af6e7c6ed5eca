"""Reading settings from the environment: typed values, refused at start-up when malformed.

``console.settings`` reads every variable through these (and documents each
where it reads it); the data directory and the key an embedded install keeps
in it are made here. Imports nothing of Airlock but ``dockergate.targets`` (its rule lists).
"""

import base64
import os
import secrets
import shutil
import subprocess
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


def data_dir(name: str, default: Path) -> Path:
    """The data dir named by ``name``; an empty value is the default, not the working dir."""
    return Path(env(name).strip() or default)


def private_data_dir(path: Path) -> Path:
    """The data dir, created readable by this user alone (0700), never in a checkout."""
    refuse_checkout(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def refuse_checkout(path: Path) -> None:
    """Refuse a data dir inside a git work tree unless the tree ignores it.

    A data dir holds the install's key and database: inside a checkout, one
    ``git add -A`` publishes them (and a copy of the tree into an image ships them).
    """
    path = path.absolute()
    tree = next((folder for folder in (path, *path.parents) if (folder / ".git").exists()), None)
    if tree is None:
        return
    git = shutil.which("git")
    if git is not None:
        # safe.directory: the tree may belong to another user; only its ignore rules are read.
        # The trailing slash asks about a directory, also one not made yet (``/var/``).
        asked = subprocess.run(
            [
                git,
                "-c",
                "safe.directory=*",
                "-C",
                str(tree),
                "check-ignore",
                "-q",
                "--",
                f"{path}/",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if asked.returncode == 0:
            return
    why = "git is not installed to tell whether it ignores it" if git is None else "not ignored"
    raise ImproperlyConfigured(
        f"the data dir {path} is inside the git work tree {tree} ({why}): it would hold this "
        "install's secret key and database where a commit takes them along. Set "
        "AIRLOCK_DATA_DIR to a directory outside the checkout (the default ./var is ignored)."
    )


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


def derived_key(secret_key: str) -> str:
    """A Fernet key derived from ``secret_key`` for sealing credentials alone (HKDF-SHA256):
    kept as the secret key is, the same on every host that shares it."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    raw = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"airlock credentials key"
    ).derive(secret_key.encode())
    return base64.urlsafe_b64encode(raw).decode("ascii")


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
