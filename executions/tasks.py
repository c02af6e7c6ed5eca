"""Celery tasks: take a primary key, reload, check state, call one service."""

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown

from . import services, sessions, targets
from .output import flush_threads
from .sandboxes import resolve_backend_name
from .sandboxes.reaper import reap_orphans


@celeryd_after_setup.connect
def _consume_own_session_queue(sender, instance, **kwargs) -> None:
    """Every worker process also consumes a queue of its own: its sessions' executes."""
    instance.app.amqp.queues.select_add(sessions.session_queue())


@worker_ready.connect
def _start_session_reaper(**kwargs) -> None:
    sessions.start_reaper()


@worker_shutdown.connect
def _release_flush_threads(**kwargs) -> None:
    flush_threads().release()  # their database connections close with the worker


@shared_task(name=services.RUN_EXECUTION, ignore_result=True, acks_late=False)
def run_execution(execution_id: int) -> None:
    # acks_late is off on purpose: a worker that dies mid-run does not get the
    # message redelivered; the sweeper marks the execution lost instead.
    services.run(execution_id)


@shared_task(name="executions.tasks.sweep", ignore_result=True)
def sweep() -> dict:
    return services.sweep()


@shared_task(name=sessions.OPEN_SESSION, ignore_result=True)
def open_session(session_id: int) -> None:
    sessions.open_session(session_id)


@shared_task(name=sessions.CLOSE_SESSION, ignore_result=True)
def close_session(session_id: int) -> None:
    sessions.close_runtime(session_id)


@shared_task(name="executions.tasks.reap_sandboxes", ignore_result=True)
def reap_sandboxes() -> dict:
    """Periodic: end orphaned sandbox containers and stray runsc processes."""
    if resolve_backend_name() not in ("docker", "gvisor"):
        return {}
    report = reap_orphans()
    return {"containers": report.containers, "processes": report.processes}


@shared_task(name=targets.remote.READ_TASK, ignore_result=True)
def read_target(kind: str, parameters: dict, seconds: float, key: str) -> None:
    """A page on another host waits for this host's state of a target (``targets.remote``)."""
    targets.answer(kind, parameters, seconds, key)
