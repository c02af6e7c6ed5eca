"""A data dir never lives where a commit would take its key along."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.serving import FOREIGN_ENV, ROOT, free_port

# Its own deployment (serve, manage.py with a data dir of its own): one pass is enough.
pytestmark = pytest.mark.any_database


def manage(data_dir, *args, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in (*FOREIGN_ENV, "DEBUG")}
    base.update(AIRLOCK_DATA_DIR=str(data_dir), **env)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=data_dir if data_dir and os.path.isdir(data_dir) else ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def checkout(tmp_path, ignored: str = ""):
    tree = tmp_path / "checkout"
    tree.mkdir()
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    (tree / ".gitignore").write_text(ignored)
    return tree


def test_migrate_refuses_a_data_dir_a_commit_would_take_along(tmp_path):
    tree = checkout(tmp_path)
    for data_dir in (tree, tree / "data"):
        refused = manage(data_dir, "migrate")
        assert refused.returncode != 0
        assert f"the data dir {data_dir} is inside the git work tree {tree}" in refused.stderr
        assert "Traceback" not in refused.stderr
        # Nothing was made before the refusal: no key, no database.
        assert not (data_dir / "secret_key").exists()
        assert not list(tree.rglob("*.sqlite3"))


def test_migrate_refuses_it_also_when_the_key_is_given(tmp_path):
    """With SECRET_KEY and DATABASE_URL the settings never touch the data dir; migrate does."""
    tree = checkout(tmp_path)
    database = f"sqlite:///{tmp_path / 'elsewhere.sqlite3'}"
    refused = manage(tree / "data", "migrate", SECRET_KEY="k" * 50, DATABASE_URL=database)
    assert refused.returncode == 1
    assert refused.stderr.startswith("CommandError: the data dir")
    assert not (tree / "data").exists()


def test_serve_refuses_it_before_it_listens(tmp_path):
    tree = checkout(tmp_path)
    refused = manage(tree / "data", "serve", "--port", str(free_port()), SECRET_KEY="k" * 50)
    assert refused.returncode == 1
    assert "CommandError: the data dir" in refused.stderr
    assert not (tree / "data").exists()


def test_a_data_dir_the_checkout_ignores_is_used(tmp_path):
    tree = checkout(tmp_path, ignored="/var/\n")
    done = manage(tree / "var", "migrate", "--verbosity", "0")
    assert done.returncode == 0, done.stderr
    assert (tree / "var" / "secret_key").exists()
    status = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout.split() == ["??", ".gitignore"]


def test_an_empty_data_dir_setting_is_the_default_not_the_working_dir(tmp_path):
    # Path("") is the working dir: a key written there once was committed with the tree.
    shown = manage(
        tmp_path, "shell", "-c", "from django.conf import settings; print(settings.DATA_DIR)"
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == str(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    empty = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; print(settings.DATA_DIR)",
        ],
        cwd=elsewhere,
        env={
            **os.environ,
            "AIRLOCK_DATA_DIR": "",
            "SECRET_KEY": "k" * 50,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "PYTHONPATH": str(ROOT),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.strip() == str(ROOT / "var")
    assert os.listdir(elsewhere) == []
