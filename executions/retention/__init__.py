"""Retention: old output archived to files, then removed from the database, a day at a time.

Owns the archive (``archive``: one compressed JSON-lines file per day of
finished executions, a manifest with each file's SHA-256, checked on every
read) and the pass that fills it (``prune``: the output of executions that
finished before the cutoff, written out, then deleted in short batches so
that no write of the hot path waits long behind it), its periodic task
(``tasks``) and ``manage.py retention``. The audit trail is never pruned.

May import the executions app's models and choices, ``audit`` (each pass is
recorded) and ``infrastructure``.
"""
