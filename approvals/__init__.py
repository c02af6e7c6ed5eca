"""Approvals: what agents propose, how policy routes it, and who says yes.

One Django app (every model keeps the ``approvals`` label), one package per
concern, in layers that import downwards only (``pyproject.toml`` holds the
contract CI checks):

- ``agents/`` — the agents' interface: the REST API, MCP, long-poll waiting,
  bearer-token authentication.
- ``review/`` — the reviewers' console: pages, forms, the live queue, the
  overview and its charts.
- ``notify/`` — telling people: the outbox's drain, one module per channel
  (console, email, webhooks, Slack), review links, the delivery log and its
  retries.
- ``core/`` — proposals and decisions: submit, decide, quorum, expiry, the
  outbox the core writes events to, agents and their tokens.
- ``guard/`` — one agent's share: whether it may propose now (paused,
  ``max_pending``, its proposals-per-minute bucket), its rejections in a row.
- ``policy/`` — the rules and how they change: the cascade, policy as code,
  simulation, suggestions, pre-validators, and ``risk/``.
- ``models.py``, ``choices.py`` — the rows every layer reads (agents,
  proposals, decisions, the outbox) and their vocabulary; each concern keeps
  its own tables in its package (``policy/models.py``, ``notify/models.py``).

Below the app: ``executions`` (the core asks ``executions.services`` to
start or cancel a run), ``accounts``, ``audit`` and ``infrastructure``.
"""
