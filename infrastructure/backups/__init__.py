"""Backups of either deployment: a consistent copy taken while Airlock runs, checked, restored.

A backup is a directory (0700) of the database's copy, the install's secret
key when it lives in the data directory, and ``manifest.json``: the kind,
when, from where, each file's SHA-256 and size, and the audit chain's last
sequence number in the copy.

Owns the manifest and its checks (``manifest``), one module per database
(``sqlite``: SQLite's online backup API; ``postgres``: ``pg_dump`` and
``pg_restore`` from one exported snapshot), what the commands and the
schedule call, by the deployment in force (``deployments``: back up,
restore, verify in a scratch place) and the scheduled backups that keep the
newest N (``scheduled``, ``tasks``). May import Django's settings and
database only: it runs ``manage.py`` in a subprocess to verify.
"""
