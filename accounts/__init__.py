"""People: who they are, how they prove it, and what they may do.

Owns the roles (``roles``: who is an agent, a reviewer, an admin; who may
review; granting and withdrawing review rights, audited) and the console's
view decorators that enforce them (``access``); sign-in (django-allauth:
``adapters``, ``views``, ``signins`` audits every sign-in, failure, lock-out
and factor change); sessions (``middleware`` ends idle and old ones,
``sessions`` lists and ends them); second factors and step-up (``stepup``:
how fresh a proof a decision needs, and the decorator for admin pages); and
single sign-on (``sso``, its own package).

May import ``audit`` and ``infrastructure``; every app above it asks it who
someone is, it never asks them.
"""
