"""Executions: carrying out what was approved, in a sandbox, with its output streamed live.

Owns the execution and its states (``models``, ``choices``), the workflows
that move them (``services``: create, dispatch, claim, run, finish, cancel,
sweep), the action catalog (``actions/``: scripts, sandbox sessions, Docker,
host), the sandbox backends behind one interface (``sandboxes/``: local,
docker, gvisor), persistent sessions on a worker (``sessions``), the output
recorder (``output``), the one function that pushes to subscribers
(``broadcast``), the Celery tasks, the REST endpoints (the list in ``listing``), the execution page,
the output websocket, retention (``retention/``: old output archived a day per file, then
removed), the live state of what an action would touch, read-only (``targets/``: a
container, a service), and its spans in its proposal's trace (``traces``: the run, the report).

Never imports ``approvals``: what approvals needs to hear (a run ended) it
sends as a signal (``signals``). May import ``accounts``, ``audit`` and
``infrastructure``; ``sandboxes/`` imports nothing of Airlock's but itself.
"""
