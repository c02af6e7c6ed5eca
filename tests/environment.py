"""Loaded with ``-p`` before Django's settings: test runs keep away from ./var."""

import os
import tempfile

os.environ.setdefault("AIRLOCK_DATA_DIR", tempfile.mkdtemp(prefix="airlock-test-"))
