"""Telling people: every recorded event, to every channel, as each person prefers.

Owns the drain of the core's outbox (``outbox``), the channel interface
(``base.Notifier``) and one module per channel (``console``, ``email``,
``webhooks``, ``slack/``), the signed one-tap review links mailed to
reviewers (``review_links``), the delivery log with its one retry state
(``deliveries``, ``models``) and the tasks that run them.

A new channel is a ``Notifier`` in a module of its own, listed in the
``NOTIFIERS`` setting; channels never import each other. May import the
core (a decision through a link or Slack goes through
``core.services.decide``), the policy, the app's models, ``executions``
(broadcast), ``accounts``, ``audit`` and ``infrastructure``.
"""
