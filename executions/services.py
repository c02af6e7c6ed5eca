"""Execution workflows: create with the approval, dispatch, run, cancel, sweep.

The database is the source of truth. Every state change is one conditional
update (zero rows = someone else won); enqueueing and broadcasting happen
after commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from audit.services import record
from infrastructure.credentials import mask_text
from infrastructure.enqueue import enqueue as enqueue_task
from infrastructure.prepared import PreparedInsert, PreparedUpdate

from . import sessions
from .actions import ActionContext, get_action
from .actions.base import failed
from .broadcast import PROPOSALS_GROUP, broadcast_on_commit, execution_group
from .choices import TERMINAL, TRANSITIONS, ExecutionStatus
from .models import Execution, OutputChunk
from .output import DATABASE_AWAY, ExecutionRecorder, until_committed
from .placement import elsewhere, limits_for, queue_for
from .sandboxes.base import Limits, RunOutcome
from .signals import execution_ended
from .traces import traced

log = logging.getLogger(__name__)
RUN_EXECUTION = "executions.tasks.run_execution"  # the task that runs one (tasks.py)
REPORTED_BACKEND = "agent"  # what carried out an execution its agent reports
_insert_execution = PreparedInsert(Execution)
_update_execution = PreparedUpdate(Execution)


class ExecutionConflict(Exception):
    """The execution is not in a state that allows the requested change."""


def command_hash(action: str, parameters: dict) -> str:
    """sha256 of the canonical form of an action: what provenance pins down."""
    canonical = json.dumps(
        {"action": action, "parameters": parameters}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def create_execution(
    *,
    action: str,
    parameters: dict,
    requested_by: str,
    capabilities_used: list[str],
    sealed: str | None = None,
    secret_patterns: tuple[str, ...] = (),
) -> Execution:
    """The queued execution of an approval, inside the approval's transaction; ``queued``
    records and enqueues it once the approval that it carries out is recorded.

    Its first dispatch is recorded with the row; should the enqueue fail, the
    sweeper dispatches it again. An action the agent carries out itself
    (``reported``) is not queued: it is running from its approval on, until
    the agent reports or ``TOOL_REPORT_SECONDS`` pass.
    """
    row = {
        "action": action,
        "parameters": parameters,  # as shown; what runs is ``sealed``, if anything was masked
        "sealed": sealed,
        "secret_patterns": list(secret_patterns) or None,
        "requested_by": requested_by,
        "command_hash": command_hash(action, parameters),
        "capabilities_used": capabilities_used,
    }
    spec = get_action(action)
    if spec is not None and spec.reported:
        now = timezone.now()
        return _insert_execution.create(
            **row,
            status=ExecutionStatus.RUNNING,
            backend=REPORTED_BACKEND,
            started_at=now,
            report_by=now + timedelta(seconds=settings.TOOL_REPORT_SECONDS),
        )
    return _insert_execution.create(
        **row,
        queue=queue_for(action, parameters),
        limits=limits_for(action, parameters).as_dict(),
        dispatch_count=1,
        dispatched_at=timezone.now(),
    )


def queued(execution: Execution, actor: str) -> None:
    """Record a new execution as queued; it is enqueued once the transaction commits.
    One the agent carries out is recorded as waiting for its report instead."""
    if execution.report_by is not None:
        record(
            actor,
            "execution.awaiting_report",
            execution,
            action=execution.action,
            report_by=execution.report_by.isoformat(),
        )
        _announce(execution)
        return
    record(actor, "execution.queued", execution, action=execution.action, queue=execution.queue)
    transaction.on_commit(lambda: enqueue(execution.pk, execution.queue))


class ReportRefused(Exception):
    """A report the execution does not take: ``status`` is the HTTP answer's."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def carry_out(execution_id: int, carrier: str, **data) -> Execution | None:
    """Take an execution its agent would report, to carry it out here instead (the MCP
    gateway): once, while it still awaits its report. None if it is not waiting any more
    (reported, carried out, cancelled or lost). ``carrier`` is what carries it out."""
    with transaction.atomic():
        moved = Execution.objects.filter(
            pk=execution_id,
            status=ExecutionStatus.RUNNING,
            backend=REPORTED_BACKEND,
            report_by__isnull=False,
        ).update(backend=carrier)
        if not moved:
            return None
        execution = Execution.objects.get(pk=execution_id)
        record(carrier, "execution.started", execution, backend=carrier, **data)
        _announce(execution)
    return execution


@traced("execution.report")
def report(
    execution_id: int,
    reporter: str,
    succeeded: bool,
    output: object,
    carrier: str = REPORTED_BACKEND,
    error: str = "the agent reported the call failed",
) -> Execution:
    """The outcome of an execution its agent carried out, as that agent reports it: once,
    before the deadline; the output becomes the execution's stdout. (An execution the
    gateway took with ``carry_out`` is reported by it, with its ``carrier``.)"""
    execution = Execution.objects.filter(pk=execution_id).first()
    if execution is None:
        raise ReportRefused(404, "not_found", f"execution {execution_id} does not exist")
    if execution.requested_by != reporter:
        raise ReportRefused(
            403,
            "permission_denied",
            f"execution {execution_id} carries out another agent's proposal; only it reports",
        )
    if execution.report_by is None:
        raise _conflict(f"execution {execution_id} is carried out by Airlock, not reported")
    if execution.backend != carrier and execution.status == ExecutionStatus.RUNNING:
        raise _carried_by_another(execution)
    if output is None:  # the call returned nothing
        output = ""
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    _, known = execution.to_run()
    text = mask_text(text, known, tuple(execution.secret_patterns or ()))[0]
    data = text.encode()
    truncated = len(data) > settings.OUTPUT_CAP_BYTES
    if truncated:  # cut at the cap, never inside a character
        text = data[: settings.OUTPUT_CAP_BYTES].decode(errors="ignore")
        data = text.encode()
    now = timezone.now()
    status = ExecutionStatus.SUCCEEDED if succeeded else ExecutionStatus.FAILED
    with transaction.atomic():
        ended = _take(
            execution_id,
            ExecutionStatus.RUNNING,
            status,
            where={"backend": carrier},  # the gateway may have taken it since it was read
            exit_code=0 if succeeded else 1,
            finished_at=now,
            truncated=truncated,
            last_seq=1 if text else 0,
            output_bytes=len(data),
            error="" if succeeded else error,
        )
        if ended is None:
            execution.refresh_from_db()
            if execution.status == ExecutionStatus.RUNNING:
                raise _carried_by_another(execution)
            if execution.status == ExecutionStatus.LOST:
                raise _conflict(
                    f"execution {execution_id} is lost: the report was due by "
                    f"{execution.report_by.isoformat()}"
                )
            if execution.status == ExecutionStatus.CANCELLED:
                raise _conflict(
                    f"execution {execution_id} was cancelled by {execution.cancel_requested_by} "
                    "before it was reported"
                )
            raise _conflict(f"execution {execution_id} was already reported ({execution.status})")
        if text:
            OutputChunk.objects.create(execution=ended, seq=1, stream="stdout", data=text)
        duration = int((now - ended.started_at).total_seconds() * 1000) if ended.started_at else 0
        record(
            reporter if carrier == REPORTED_BACKEND else carrier,
            f"execution.{status}",
            ended,
            exit_code=ended.exit_code,
            duration_ms=duration,
            truncated=truncated,
            reported=True,
        )
        _announce(ended)
    return ended


def _conflict(message: str) -> ReportRefused:
    return ReportRefused(409, "conflict", message)


def _carried_by_another(execution: Execution) -> ReportRefused:
    return _conflict(
        f"execution {execution.pk} is being carried out by the {execution.backend}, "
        "which reports it",
    )


def dispatch(execution_id: int) -> bool:
    """Enqueue the run of an execution still queued again (the sweeper, a closed session)."""
    execution = Execution.objects.filter(pk=execution_id, status=ExecutionStatus.QUEUED).first()
    if execution is None:
        return False
    Execution.objects.filter(pk=execution_id).update(
        dispatch_count=F("dispatch_count") + 1, dispatched_at=timezone.now()
    )
    return enqueue(execution_id, execution.queue)


def enqueue(execution_id: int, queue: str) -> bool:
    """The one place that enqueues a run."""
    try:
        enqueue_task(RUN_EXECUTION, execution_id, queue=queue)
    except Exception:
        # The sweeper re-dispatches it; the approval itself is already safe.
        log.exception("could not enqueue execution %s", execution_id)
        return False
    return True


def _take(
    execution_id: int,
    source: ExecutionStatus,
    to: ExecutionStatus,
    where: dict | None = None,
    **fields,
) -> Execution | None:
    """One guarded update: the execution as this caller moved it from ``source`` to ``to``
    (read by the same statement), or None if it was not in ``source`` (or ``where``) any more."""
    assert to in TRANSITIONS[source], f"{source} -> {to} is not a transition"
    guard = {"pk": execution_id, "status": source, **(where or {})}
    moved = _update_execution.returning(guard, status=to, **fields)
    return moved[0] if moved else None


def _announce(execution: Execution) -> None:
    # The proposals group first: long-polling agents wait on it.
    broadcast_on_commit(
        PROPOSALS_GROUP,
        {"type": "execution.changed", "execution_id": execution.pk, "status": execution.status},
    )
    message = {"type": "execution.status", **status_message(execution)}
    broadcast_on_commit(execution_group(execution.pk), message)
    if execution.is_terminal:
        pk, status = execution.pk, execution.status
        transaction.on_commit(lambda: _tell_ended(pk, status))


def _tell_ended(execution_id: int, status: str) -> None:
    # Robust: a receiver's failure must not fail the worker that finished the run.
    for receiver, result in execution_ended.send_robust(
        sender=Execution, execution_id=execution_id, status=status
    ):
        if isinstance(result, Exception):
            log.error("%s failed for execution %s: %r", receiver, execution_id, result)


def status_message(execution: Execution) -> dict:
    return {
        "execution_id": execution.pk,
        "status": execution.status,
        "exit_code": execution.exit_code,
        "timed_out": execution.timed_out,
        "truncated": execution.truncated,
        "last_seq": execution.last_seq,
        "terminal": execution.is_terminal,
    }


def claim(execution_id: int, worker_host: str) -> Execution | None:
    """queued → running, for exactly one worker (of its host, for a host action)."""
    now = timezone.now()
    fields = {"worker_host": worker_host, "started_at": now, "heartbeat_at": now}
    with transaction.atomic():
        # One statement decides and reads the row: a worker that lost the race changed nothing.
        execution = _take(execution_id, ExecutionStatus.QUEUED, ExecutionStatus.RUNNING, **fields)
        if execution is None:
            return None
        if host := elsewhere(execution, worker_host):
            # A worker consuming another host's queue: the action stays queued for its own host.
            transaction.set_rollback(True)
            log.error(
                "execution %s is for host %s, not %s: left queued", execution_id, host, worker_host
            )
            return None
        record("system", "execution.running", execution, worker_host=worker_host)
        _announce(execution)
    return execution


class Heartbeats:
    """One thread per worker process beats for every run under way and hears cancels.

    While runs are under way it marks them alive every
    ``WORKER_HEARTBEAT_SECONDS`` (one UPDATE for all) and every quarter
    second turns a requested cancel into the run's cancel event (one SELECT
    for all). With none under way it sleeps on an event and holds no
    database connection: a run costs no thread of its own to start and join.
    """

    POLL_SECONDS = 0.25

    def __init__(self):
        self._runs: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._busy = threading.Event()  # set while there are runs to watch
        self._thread: threading.Thread | None = None

    def watch(self, execution_id: int, cancel: threading.Event) -> None:
        with self._lock:
            self._runs[execution_id] = cancel
            self._busy.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
                self._thread.start()

    def forget(self, execution_id: int) -> None:
        with self._lock:
            self._runs.pop(execution_id, None)
            if not self._runs:
                self._busy.clear()

    def _watched(self) -> dict[int, threading.Event]:
        with self._lock:
            return dict(self._runs)

    def _run(self) -> None:
        last_beat = time.monotonic()
        while True:
            if not self._busy.is_set():
                with contextlib.suppress(*DATABASE_AWAY):
                    connection.close()  # idle: no connection held
                self._busy.wait()
                last_beat = time.monotonic()  # the claim itself marked the new run alive
            time.sleep(self.POLL_SECONDS)
            runs = self._watched()
            if not runs:
                continue
            try:
                close_old_connections()
                if time.monotonic() - last_beat >= settings.WORKER_HEARTBEAT_SECONDS:
                    Execution.objects.filter(pk__in=runs, status=ExecutionStatus.RUNNING).update(
                        heartbeat_at=timezone.now()
                    )
                    last_beat = time.monotonic()
                waiting = [pk for pk, cancel in runs.items() if not cancel.is_set()]
                if waiting:
                    for pk in Execution.objects.filter(
                        pk__in=waiting, cancel_requested_at__isnull=False
                    ).values_list("pk", flat=True):
                        runs[pk].set()
            except DATABASE_AWAY:
                # The database restarting: beat again once it is back (the runs go on).
                with contextlib.suppress(*DATABASE_AWAY):
                    connection.close()
            except Exception:  # never let one bad pass end the beats of every run
                log.exception("heartbeat failed; trying again")


_heartbeats = Heartbeats()


@traced("execution.run")  # in its proposal's trace, a sandbox's run within
def run(execution_id: int) -> Execution | None:
    """Claim and carry out one execution; safe to call twice (the second does nothing)."""
    execution = claim(execution_id, settings.WORKER_HOSTNAME)
    if execution is None:
        return None
    spec = get_action(execution.action)
    cancel = threading.Event()
    parameters, known = execution.to_run()
    recorder = ExecutionRecorder(
        execution.pk, settings.OUTPUT_CAP_BYTES, masker=lambda: execution.output_masker(known)
    )
    _heartbeats.watch(execution.pk, cancel)
    started = time.monotonic()
    try:
        if spec is None:
            outcome = failed("none", f"unknown action {execution.action!r}", recorder, started)
        else:
            context = ActionContext(
                sink=recorder,
                cancel=cancel,
                limits=Limits(**_limit_fields(execution.limits)),
                execution_id=execution.pk,
            )
            outcome = spec.runner(parameters, context)
    except Exception as exc:  # a runner bug must still end the execution
        log.exception("execution %s crashed", execution.pk)
        outcome = failed("none", f"internal error: {exc}", recorder, started)
    finally:
        _heartbeats.forget(execution.pk)
        rest = recorder.stop()
    return finish(execution, outcome, recorder, rest)


def _limit_fields(stored: dict) -> dict:
    fields = dict(stored)
    fields["cpu_seconds"] = fields.pop("cpu_seconds", None)
    return {k: v for k, v in fields.items() if k in Limits.__dataclass_fields__}


def outcome_status(outcome: RunOutcome) -> ExecutionStatus:
    if outcome.cancelled:
        return ExecutionStatus.CANCELLED
    if outcome.timed_out:
        return ExecutionStatus.TIMED_OUT
    return ExecutionStatus.SUCCEEDED if outcome.success else ExecutionStatus.FAILED


def finish(
    execution: Execution,
    outcome: RunOutcome,
    recorder: ExecutionRecorder,
    rest: Sequence[OutputChunk] = (),
) -> Execution:
    """running → a terminal state, with the result contract (and ``rest``, the output the
    recorder had not written yet: in the same transaction, told before the end)."""
    status = outcome_status(outcome)
    fields = {
        "exit_code": outcome.exit_code,
        "timed_out": outcome.timed_out,
        "truncated": recorder.truncated,
        "error": outcome.error or "",
        "backend": outcome.backend,
        "details": outcome.details,
        "finished_at": timezone.now(),
        # The output's counters too: one update of the row ends the run.
        "last_seq": recorder.seq,
        "output_bytes": recorder.output_bytes_with(rest),
    }

    def write() -> Execution:
        with transaction.atomic():
            recorder.store(rest, counters=False)
            ended = _take(execution.pk, ExecutionStatus.RUNNING, status, **fields)
            if ended is None:
                if rest:
                    recorder.count(rest)
                execution.refresh_from_db()
                log.warning(
                    "execution %s ended as %s after being %s",
                    execution.pk,
                    status,
                    execution.status,
                )
                return execution
            record(
                "system",
                f"execution.{status}",
                ended,
                exit_code=outcome.exit_code,
                duration_ms=outcome.duration_ms,
                truncated=recorder.truncated,
            )
            _announce(ended)
            return ended

    return until_committed(write, f"the end of execution {execution.pk}")


def request_cancel(execution_id: int, actor: str) -> Execution:
    """queued → cancelled at once; running → the worker is told and stops it. One the
    agent carries out is cancelled at once too: its approval is withdrawn, and a
    report after it is refused."""
    with transaction.atomic():
        now = timezone.now()
        sources = [ExecutionStatus.QUEUED]
        if Execution.objects.filter(pk=execution_id, report_by__isnull=False).exists():
            sources.append(ExecutionStatus.RUNNING)  # no worker to tell: withdrawn at once
        for source in sources:
            execution = _take(
                execution_id,
                source,
                ExecutionStatus.CANCELLED,
                finished_at=now,
                cancel_requested_at=now,
                cancel_requested_by=actor,
            )
            if execution:
                record(actor, "execution.cancelled", execution, before=source)
                _announce(execution)
                return execution
        updated = Execution.objects.filter(
            pk=execution_id, status=ExecutionStatus.RUNNING, cancel_requested_at__isnull=True
        ).update(cancel_requested_at=now, cancel_requested_by=actor)
        execution = Execution.objects.get(pk=execution_id)
        if updated:
            record(actor, "execution.cancel_requested", execution)
        elif execution.status in TERMINAL:
            raise ExecutionConflict(f"execution {execution_id} already {execution.status}")
    return execution


def sweep() -> dict:
    """Re-dispatch executions left queued; mark as lost those whose worker died."""
    # First: a queued execute of an orphaned session now fails clearly on any worker.
    for execution_id in sessions.close_orphans():
        dispatch(execution_id)
    now = timezone.now()
    stale_dispatch = now - timedelta(seconds=settings.REQUEUE_AFTER_SECONDS)
    requeued = 0
    for execution_id in Execution.objects.filter(
        Q(dispatched_at__lt=stale_dispatch) | Q(dispatched_at__isnull=True),
        status=ExecutionStatus.QUEUED,
        created_at__lt=stale_dispatch,
    ).values_list("pk", flat=True):
        requeued += dispatch(execution_id)
    lost = _mark_lost(
        Q(report_by__lt=now),
        now,
        "the agent did not report how the call went in time; it may or may not have been made",
        lambda execution: {"report_by": str(execution.report_by)},
    )
    dead_before = now - timedelta(seconds=settings.WORKER_LOST_AFTER_SECONDS)
    lost += _mark_lost(
        Q(heartbeat_at__lt=dead_before),
        now,
        "worker stopped heartbeating; not re-run",
        lambda execution: {"worker_host": execution.worker_host},
    )
    return {"requeued": requeued, "lost": lost}


def _mark_lost(which: Q, now, error: str, data: Callable[[Execution], dict]) -> int:
    """Running executions that ``which`` picks, lost, each recorded with ``data`` of it."""
    lost = 0
    for execution_id in Execution.objects.filter(which, status=ExecutionStatus.RUNNING).values_list(
        "pk", flat=True
    ):
        with transaction.atomic():
            if execution := _take(
                execution_id, ExecutionStatus.RUNNING, ExecutionStatus.LOST,
                finished_at=now, error=error,
            ):  # fmt: skip
                record("system", "execution.lost", execution, **data(execution))
                _announce(execution)
                lost += 1
    return lost
