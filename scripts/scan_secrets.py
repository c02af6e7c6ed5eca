"""Fail when a tracked file holds a secret: a key, a token, a private key, a data dir's file.

    .venv/bin/python scripts/scan_secrets.py [--root DIR]

Two checks over the files git tracks in ``DIR`` (default: the working dir):

- detect-secrets, with the plugins and filters of ``.secrets.baseline``:
  anything it finds that the baseline does not hold is new, and fails. Every
  entry of the baseline has been reviewed and marked ``"is_secret": false``
  (test passwords and the like); one that is not fails too. After a review,
  ``detect-secrets scan --baseline .secrets.baseline`` takes in a false
  positive and ``detect-secrets audit .secrets.baseline`` marks it.
- the files a data dir holds (``console/settings.py``), by name: a key file
  is a bare random string, which no pattern of detect-secrets matches.

Prints each finding as ``path:line: what`` and exits 1; 0 when there is none.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import PurePosixPath

from detect_secrets.core import baseline as baselines
from detect_secrets.core.secrets_collection import SecretsCollection
from detect_secrets.settings import transient_settings

BASELINE = ".secrets.baseline"
# What a data dir holds that must never be committed (see .gitignore).
DATA_DIR_NAMES = (
    "secret_key",
    "audit-checkpoints.jsonl",
    "celerybeat-schedule",
)
DATA_DIR_SUFFIXES = (".sqlite3",)


def tracked(root: str) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    return [
        name for name in listed.split("\0") if name and os.path.isfile(os.path.join(root, name))
    ]


def data_dir_files(files: list[str]) -> list[str]:
    found = []
    for name in files:
        base = PurePosixPath(name).name
        if base in DATA_DIR_NAMES or base.endswith(DATA_DIR_SUFFIXES) or ".sqlite3-" in base:
            found.append(f"{name}:1: a file a data dir holds (its key or database)")
    return found


def detected(root: str, files: list[str]) -> list[str]:
    saved = baselines.load_from_file(os.path.join(root, BASELINE))
    with transient_settings(
        {"plugins_used": saved["plugins_used"], "filters_used": saved["filters_used"]}
    ):
        known = SecretsCollection.load_from_baseline(saved)
        scanned = SecretsCollection(root=root)
        scanned.scan_files(*[f for f in files if f != BASELINE])
    # By file, type and the secret's hash: a line number moves with every edit above it.
    reviewed = {(name, secret.type, secret.secret_hash) for name, secret in known}
    found = [
        f"{name}:{secret.line_number}: {secret.type} (not in {BASELINE})"
        for name, secret in scanned
        if (name, secret.type, secret.secret_hash) not in reviewed
    ]
    for name, secret in known:
        if secret.is_secret is not False:
            found.append(
                f"{name}:{secret.line_number}: {secret.type} (in {BASELINE}, not marked reviewed)"
            )
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the git work tree to scan")
    root = os.path.abspath(parser.parse_args().root)
    files = tracked(root)
    found = sorted(data_dir_files(files) + detected(root, files))
    for line in found:
        print(line)
    if found:
        print(
            f"[secrets] {len(found)} secret(s) in tracked files: remove them (and change them)",
            file=sys.stderr,
        )
        return 1
    print(f"[secrets] none in {len(files)} tracked files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
