"""Loaded with ``-p`` before Django's settings: test runs keep away from ./var,
and parallel workers keep away from each other.

Each xdist worker gets a data dir and a channel-layer prefix of its own. The
controller's environment is inherited by its workers, so what it set must
not be taken as theirs: with one shared data dir the workers' doorbells rang
each other's channel-layer pollers (with row ids of another database) and
their Celery workers took each other's messages from one broker folder; with
one prefix, workers sharing a Redis heard each other's broadcasts.
"""

import os
import tempfile

_worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
_root = os.environ.get("AIRLOCK_TEST_DATA_ROOT") or os.environ.get("AIRLOCK_DATA_DIR")
if not _root:
    _root = tempfile.mkdtemp(prefix="airlock-test-")
os.environ["AIRLOCK_TEST_DATA_ROOT"] = _root
os.environ["AIRLOCK_DATA_DIR"] = os.path.join(_root, _worker)
os.makedirs(os.environ["AIRLOCK_DATA_DIR"], mode=0o700, exist_ok=True)
os.environ["CHANNEL_LAYER_PREFIX"] = f"airlock-test-{_worker}"
