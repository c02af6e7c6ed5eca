"""Persistent sandbox sessions: open on a worker, execute there, close, reap when idle.

The interpreters live in the worker process that opened them (a
``SessionRegistry``). Every worker process consumes a queue of its own,
``session.<host>.<pid>.<nonce>``, and the session row names it, so executes
reach that process even when several workers share a host. A worker process
that dies takes its sessions with it: the sweeper closes sessions whose
worker has not been seen for ``SESSION_WORKER_TIMEOUT_SECONDS``, and their
executes then fail with a clear error instead of waiting forever.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from audit.services import record
from infrastructure.enqueue import enqueue

from .choices import ExecutionStatus
from .models import Execution, SandboxSession
from .sandboxes import SandboxError, get_sandbox
from .sandboxes.base import Limits, OutputSink, RunOutcome
from .sandboxes.sessions import SessionRegistry

log = logging.getLogger(__name__)
Status = SandboxSession.Status
OPEN_SESSION = "executions.tasks.open_session"  # the tasks that run on a worker (tasks.py)
CLOSE_SESSION = "executions.tasks.close_session"
REAP_EVERY_SECONDS = 30

_registry: SessionRegistry | None = None
_registry_lock = threading.Lock()
_worker_id: str | None = None


def worker_id() -> str:
    """This worker process: host, pid and a nonce (a restarted worker is another one)."""
    global _worker_id
    with _registry_lock:
        if _worker_id is None:
            _worker_id = f"{settings.WORKER_HOSTNAME}.{os.getpid()}.{secrets.token_hex(3)}"
        return _worker_id


def session_queue() -> str:
    """The queue only this worker process consumes (added when the worker starts)."""
    return f"session.{worker_id()}"


def registry() -> SessionRegistry:
    """This worker process's open sessions."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = SessionRegistry(idle_seconds=settings.SANDBOX_SESSION_IDLE_MINUTES * 60)
        return _registry


def start_reaper() -> threading.Thread:
    """Close this worker's idle sessions in the background (started with the worker)."""
    thread = threading.Thread(target=_reap_forever, name="session-reaper", daemon=True)
    thread.start()
    return thread


class SessionUnavailable(Exception):
    """The session cannot take an execute; the message says why and what to do."""


def start(owner: str, language: str) -> SandboxSession:
    """Create a session and ask a worker to open its interpreter (``starting`` until it has)."""
    session = SandboxSession.objects.create(owner=owner, language=language)
    record(owner, "sandbox_session.created", session, language=language)
    enqueue(OPEN_SESSION, session.pk, queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    return session


def open_session(session_id: int) -> SandboxSession:
    """On a worker: start the interpreter and pin the session to this worker process's queue."""
    session = SandboxSession.objects.get(pk=session_id)
    if session.status != Status.STARTING:
        return session
    try:
        runtime = registry().create(get_sandbox(), session.language, Limits())
    except SandboxError as exc:
        _close(session, f"could not start: {exc}", error=str(exc))
        return session
    updated = SandboxSession.objects.filter(pk=session_id, status=Status.STARTING).update(
        status=Status.ACTIVE,
        runtime_id=runtime.id,
        backend=runtime.backend,
        worker_host=worker_id(),
        queue=session_queue(),
        last_used_at=timezone.now(),
        worker_seen_at=timezone.now(),
    )
    if not updated:  # destroyed while it was starting
        registry().destroy(runtime.id)
    session.refresh_from_db()
    return session


def execute(
    session_id: int, code: str, sink: OutputSink, cancel: threading.Event, limits: Limits
) -> RunOutcome:
    """On the session's worker: run a snippet in the session's namespace."""
    session = SandboxSession.objects.filter(pk=session_id).first()
    runtime = registry().get(session.runtime_id) if session and session.runtime_id else None
    if session is None or session.status != Status.ACTIVE:
        raise SessionUnavailable(f"sandbox session {session_id} is not active")
    if runtime is None:
        _close(session, "its interpreter ended (idle, crashed or worker restarted)")
        raise SessionUnavailable(
            f"sandbox session {session_id} ended and its state is gone; create a new session"
        )
    SandboxSession.objects.filter(pk=session_id).update(last_used_at=timezone.now())
    outcome = runtime.execute(code, sink, cancel, limits)
    SandboxSession.objects.filter(pk=session_id).update(
        last_used_at=timezone.now(), executes=session.executes + 1
    )
    if runtime.closed:  # the snippet killed its interpreter (exit(), a limit)
        _close(session, "its interpreter exited")
    return outcome


def close_runtime(session_id: int) -> None:
    """On the session's worker: end the interpreter of a destroyed session."""
    session = SandboxSession.objects.filter(pk=session_id).first()
    if session is not None and session.runtime_id:
        registry().destroy(session.runtime_id)


def destroy(session: SandboxSession, actor: str) -> SandboxSession:
    """Mark the session closed and have its worker end the interpreter."""
    if _close(session, f"destroyed by {actor}", actor=actor) and session.queue:
        try:
            enqueue(CLOSE_SESSION, session.pk, queue=session.queue)
        except Exception:  # the worker's reaper ends it when idle
            log.exception("could not ask the worker to close session %s", session.pk)
    session.refresh_from_db()
    return session


def _close(session: SandboxSession, reason: str, actor: str = "system", error: str = "") -> bool:
    closed = (
        SandboxSession.objects.filter(pk=session.pk)
        .exclude(status=Status.CLOSED)
        .update(
            status=Status.CLOSED, closed_at=timezone.now(), closed_reason=reason[:200], error=error
        )
    )
    if closed:
        record(actor, "sandbox_session.closed", session, reason=reason)
    return bool(closed)


def reap_idle() -> int:
    """Close this worker's sessions idle past the limit, in memory and in the database."""
    idle = timedelta(minutes=settings.SANDBOX_SESSION_IDLE_MINUTES)
    reaped = 0
    for session in SandboxSession.objects.filter(
        status=Status.ACTIVE,
        worker_host=worker_id(),
        last_used_at__lt=timezone.now() - idle,
    ):
        registry().destroy(session.runtime_id)
        reaped += _close(session, "idle")
    return reaped


def mark_alive() -> int:
    """Say this worker process still holds its sessions (the reaper does, every 30 s)."""
    return SandboxSession.objects.filter(status=Status.ACTIVE, worker_host=worker_id()).update(
        worker_seen_at=timezone.now()
    )


def close_orphans() -> list[int]:
    """Close sessions whose worker process is gone (not seen for the timeout): their state is lost.

    Returns the executes that waited in those workers' queues, moved to the
    default queue: the caller dispatches them again, and any worker then
    fails them with a clear error.
    """
    timeout = settings.SESSION_WORKER_TIMEOUT_SECONDS
    stranded: list[int] = []
    for session in SandboxSession.objects.filter(
        status=Status.ACTIVE, worker_seen_at__lt=timezone.now() - timedelta(seconds=timeout)
    ):
        if not _close(session, f"its worker stopped (not seen for {timeout} s)"):
            continue
        waiting = Execution.objects.filter(status=ExecutionStatus.QUEUED, queue=session.queue)
        stranded += waiting.values_list("pk", flat=True)
        waiting.update(queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    return stranded


def _reap_forever() -> None:
    while True:
        time.sleep(REAP_EVERY_SECONDS)
        try:
            close_old_connections()
            mark_alive()
            reap_idle()
            registry().reap_idle()
        except Exception:
            log.exception("reaping idle sandbox sessions failed")
        finally:
            connection.close()
