"""People and what they may do: agents propose, reviewers decide, admins edit policy.

Owns the roles (``roles``: who is an agent, a reviewer, an admin; who may
review; granting and withdrawing review rights, audited) and the console's
view decorators that enforce them (``access``). Sign-in belongs here as it
grows beyond Django's login form (single sign-on, second factors).

May import ``audit`` and ``infrastructure``; every app above it asks it who
someone is, it never asks them.
"""
