"""Loaded with ``-p`` before Django's settings: test runs keep away from ./var,
and parallel workers sharing one Redis do not hear each other's broadcasts."""

import os
import tempfile

os.environ.setdefault("AIRLOCK_DATA_DIR", tempfile.mkdtemp(prefix="airlock-test-"))
os.environ.setdefault(
    "CHANNEL_LAYER_PREFIX", f"airlock-test-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
)
