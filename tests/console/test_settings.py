"""Settings read from the environment: the defaults a new install gets."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.serving import FOREIGN_ENV, ROOT

SHOW = "from django.conf import settings as s; print(s.DEBUG, len(s.SECRET_KEY))"


def python_with(tmp_path, code: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh process of an install whose data dir is ``tmp_path``."""
    base = {k: v for k, v in os.environ.items() if k not in (*FOREIGN_ENV, "DEBUG")}
    base.update(AIRLOCK_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="console.settings")
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def settings_with(tmp_path, **env) -> subprocess.CompletedProcess:
    return python_with(tmp_path, f"import django; django.setup(); {SHOW}", **env)


@pytest.mark.any_database
def test_an_embedded_install_runs_without_debug_on_a_key_of_its_own(tmp_path):
    shown = settings_with(tmp_path)
    assert shown.returncode == 0, shown.stderr
    debug, key_length = shown.stdout.split()
    assert debug == "False"
    assert int(key_length) >= 40
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


@pytest.mark.any_database
def test_debug_is_on_only_when_asked_for(tmp_path):
    assert settings_with(tmp_path, DEBUG="true").stdout.split()[0] == "True"


@pytest.mark.any_database
def test_the_scale_deployment_wants_a_shared_key(tmp_path):
    url = "postgres://airlock@127.0.0.1:5432/airlock"
    refused = settings_with(tmp_path, DATABASE_URL=url)
    assert refused.returncode != 0
    assert "SECRET_KEY must be set with DATABASE_URL" in refused.stderr
    assert not (tmp_path / "secret_key").exists()
    given = settings_with(tmp_path, DATABASE_URL=url, SECRET_KEY="k" * 50)
    assert given.returncode == 0, given.stderr
    assert given.stdout.split() == ["False", "50"]


def test_the_models_and_their_migrations_agree(db):
    from django.core.management import call_command

    # A model changed without its migration would be migrated differently than it runs.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def frozen_after(tmp_path, code: str) -> int:
    """``gc.get_freeze_count()`` in a fresh process after ``code``."""
    shown = python_with(tmp_path, f"import gc; {code}; print(gc.get_freeze_count())")
    assert shown.returncode == 0, shown.stderr
    return int(shown.stdout.split()[-1])


@pytest.mark.any_database
def test_web_and_worker_processes_keep_what_they_loaded_out_of_full_collections(tmp_path):
    assert frozen_after(tmp_path, "import console.asgi") > 50_000
    worker = "import django; django.setup(); from console.celery import app; "
    worker += "from celery.signals import worker_ready; worker_ready.send(sender=None)"
    assert frozen_after(tmp_path, worker) > 50_000
