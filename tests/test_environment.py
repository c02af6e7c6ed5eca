"""The suite's own environment: parallel test workers share no data dir and no channel prefix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.serving import ROOT

SHOW = "import json, os, tests.environment; print(json.dumps({k: os.environ[k] for k in KEYS}))"
KEYS = ("AIRLOCK_TEST_DATA_ROOT", "AIRLOCK_DATA_DIR", "CHANNEL_LAYER_PREFIX")


def loaded_as(worker: str | None, inherited: dict) -> dict:
    """What ``tests.environment`` sets in a process that inherited ``inherited``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env.update(inherited)
    if worker:
        env["PYTEST_XDIST_WORKER"] = worker
    shown = subprocess.run(
        [sys.executable, "-c", f"KEYS = {KEYS!r}; {SHOW}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_each_worker_gets_its_own_data_dir_and_prefix_under_the_controllers(tmp_path):
    given = tmp_path / "run"  # an AIRLOCK_DATA_DIR from outside: the run's root
    given.mkdir()
    outside = {k: "" for k in KEYS} | {"AIRLOCK_DATA_DIR": str(given)}
    controller = loaded_as(None, outside)
    # xdist's workers inherit the environment of the controller, which loaded the module first.
    first, second = loaded_as("gw0", controller), loaded_as("gw1", controller)

    dirs = [shown["AIRLOCK_DATA_DIR"] for shown in (controller, first, second)]
    assert len(set(dirs)) == 3, dirs
    assert all(os.path.dirname(d) == str(given) and os.path.isdir(d) for d in dirs), dirs
    assert first["CHANNEL_LAYER_PREFIX"] != second["CHANNEL_LAYER_PREFIX"]


def test_the_workers_of_this_run_do_not_share_this_data_dir():
    from django.conf import settings

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    assert os.path.basename(os.fspath(settings.DATA_DIR)) == worker
    assert os.environ["CHANNEL_LAYER_PREFIX"].endswith(worker)
