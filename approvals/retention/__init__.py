"""Retention: a year of history kept in bounded disk, what leaves the database archived first.

Owns the proposals' pass (``proposals``: finished proposals whose output has
been archived, with their decisions and their execution's row, written a day
per file, then deleted in short transactions), the whole pass in its order
(``passes``: output, then proposals, then audit records), its periodic task
(``tasks``) and ``manage.py retention``. The output pass is
``executions.retention``; the audit records' move, with the chain's
continuity, is ``audit.archive``; the files and their store (a directory or
an S3-compatible bucket) are ``infrastructure.archive``.

May import ``approvals.models`` and ``choices``, ``executions``, ``audit`` and
``infrastructure``.
"""
