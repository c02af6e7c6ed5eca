"""Retention of output: old output archived to day files, then removed from the database.

Owns the output pass (``prune``: the output of executions that finished
before the cutoff, written out, then deleted in short batches so that no
write of the hot path waits long behind it; an archived output read back).
The whole pass, its schedule and ``manage.py retention`` are
``approvals.retention``; the files, ``infrastructure.archive``.

May import the executions app's models and choices, ``audit`` (each pass is
recorded) and ``infrastructure``.
"""
