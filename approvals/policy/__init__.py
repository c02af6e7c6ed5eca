"""The policy: the rules that route a proposal, and how admins change them.

Owns the cascade (``rules``: deny → allow → notify → risk score, per-agent
overrides, the policy in force), its stored versions (``models``), policy as
code (``text``: YAML export, apply, diff), the preview of a draft against
history (``simulation``), rules suggested from what reviewers keep approving
(``suggestions``), the optional LLM pre-validator (``prevalidators``), the
risk score (``risk/``) and the policy's REST endpoints (``api``).

May import the app's models (to replay history), ``executions.actions`` (the
catalog), ``accounts``, ``audit`` and ``infrastructure``; never the core,
which calls it.
"""
