"""Scheduled backups: taken by a worker when beat asks, verified, the newest N kept.

In-process on whichever database the pass runs on (SQLite, or PostgreSQL in
pass 2, where the scratch database of the verification is made and dropped).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import current_app
from django.db import connection, transaction

from audit.services import record
from console.celery import _schedule_periodic_tasks
from infrastructure.backups import scheduled
from infrastructure.backups.manifest import BackupError
from infrastructure.backups.tasks import BACK_UP

pytestmark = pytest.mark.django_db(transaction=True)


def add_records(count: int) -> None:
    for n in range(count):
        with transaction.atomic():
            record("system", "test.event", None, n=n)


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_each_backup_is_verified_and_only_the_newest_are_kept(tmp_path):
    add_records(3)
    made = [scheduled.run(tmp_path, keep=2) for _ in range(3)]
    assert names(tmp_path) == sorted(path.name for path in made[1:])
    assert all((path / "manifest.json").exists() for path in made[1:])


def test_a_backup_that_does_not_verify_is_kept_aside_and_does_not_count(tmp_path):
    add_records(3)
    good = scheduled.run(tmp_path, keep=1)
    with connection.cursor() as cursor:  # the live chain is broken: its copy cannot verify
        cursor.execute("UPDATE audit_auditevent SET actor = 'user:mallory' WHERE seq = 2")
    with pytest.raises(BackupError, match="did not verify .*verify_audit.*row 2 was edited"):
        scheduled.run(tmp_path, keep=1)
    [failed] = [name for name in names(tmp_path) if name.endswith("-failed")]
    assert names(tmp_path) == sorted([good.name, failed])  # the good one still counts
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditevent")
    time.sleep(0.01)
    newest = scheduled.run(tmp_path, keep=1)
    assert names(tmp_path) == [newest.name]  # older than the one kept: both gone


def test_beat_asks_for_a_backup_only_where_a_directory_is_set(tmp_path, settings):
    app = SimpleNamespace(conf=SimpleNamespace())
    settings.BACKUP_DIR, settings.BACKUP_EVERY_HOURS = "", 24
    _schedule_periodic_tasks(app)
    assert "back-up" not in app.conf.beat_schedule
    settings.BACKUP_DIR = str(tmp_path)
    _schedule_periodic_tasks(app)
    assert app.conf.beat_schedule["back-up"] == {"task": BACK_UP, "schedule": 86400.0}

    add_records(1)
    current_app.tasks[BACK_UP].apply()
    [made] = names(tmp_path)
    assert made.startswith("airlock-") and (tmp_path / made / "manifest.json").exists()
