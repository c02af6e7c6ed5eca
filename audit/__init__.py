"""The audit trail: an append-only, hash-chained record of every change, its proof and its copies.

Owns the chain (``models``, ``services.record``), its verification
(``services.verify_chain``, ``manage.py verify_audit``), who acted
(``services.actor_label``), the signed checkpoints of its head that a rewrite
by the database's own operators cannot survive (``checkpoints``,
``manage.py audit_checkpoint``), and its shipping to sinks outside Airlock
(``shipping/``, ``manage.py audit_sinks``), and its old records moved to
the archive with the chain unbroken (``archive``). May import ``infrastructure``
only; every app above records into it.
"""
