"""The audit trail: an append-only, hash-chained record of every change, and its verification.

Owns the chain (``models``, ``services.record``), its verification
(``services.verify_chain``, ``manage.py verify_audit``) and who acted
(``services.actor_label``). May import ``infrastructure`` only; every app
above records into it.
"""
