"""Signals for the apps that build on executions (which imports none of them).

``execution_ended`` is sent once per execution, after the commit that put it
in a terminal state, with ``execution_id`` and ``status``. Receivers only
enqueue work; they must not change executions.
"""

from django.dispatch import Signal

execution_ended = Signal()
