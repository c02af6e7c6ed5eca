from django.db import models


class ExecutionStatus(models.TextChoices):
    QUEUED = "queued"  # committed with its approval; waiting for a worker
    RUNNING = "running"  # a worker claimed it and heartbeats while it runs
    SUCCEEDED = "succeeded"  # ran to the end with exit code 0
    FAILED = "failed"  # ran and failed: non-zero exit, killed by a limit, or could not start
    TIMED_OUT = "timed_out"  # killed at its wall-clock limit
    CANCELLED = "cancelled"  # stopped by a reviewer before or while running
    LOST = "lost"  # its worker stopped heartbeating; never re-run silently


ACTIVE = frozenset({ExecutionStatus.QUEUED, ExecutionStatus.RUNNING})
TERMINAL = frozenset(
    {
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.TIMED_OUT,
        ExecutionStatus.CANCELLED,
        ExecutionStatus.LOST,
    }
)
TRANSITIONS = {
    ExecutionStatus.QUEUED: frozenset({ExecutionStatus.RUNNING, ExecutionStatus.CANCELLED}),
    ExecutionStatus.RUNNING: TERMINAL,
}


class Stream(models.TextChoices):
    STDOUT = "stdout"
    STDERR = "stderr"
