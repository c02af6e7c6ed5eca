"""The approval core: proposals and decisions, from an agent's submission to a run queued.

Owns the workflows that span rows (``services``: submit → assess → decide →
queue; a reviewer's decision, the quorum, the self-approval ban; expiry and
its warning; ``withdrawal``: an agent takes a pending proposal back;
``pausing``: agents paused and resumed), the outbox each change writes its events to (``outbox``),
agents and their tokens (``tokens``), the periodic expiry (``tasks``) and a proposal's
review in its trace (``traces``: from its making to the decision, each decision an event).

May import ``approvals.guard`` (admission), ``approvals.policy`` (the cascade, the risk score), the app's
models, ``executions.services`` (to start a run), ``accounts``, ``audit`` and
``infrastructure``. It never imports the interfaces or the notification
channels: they call it, and they read what it writes.
"""
