from django.db import models

from accounts.roles import is_agent, is_reviewer
from infrastructure.credentials import OutputMasker, unseal

from .choices import ACTIVE, TERMINAL, ExecutionStatus, Stream


class ExecutionQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Reviewers see every execution; an agent only those of its own proposals."""
        if is_agent(user):
            return self.filter(proposal__agent=user.agent)
        if is_reviewer(user):
            return self
        return self.none()


class Execution(models.Model):
    """The one run of an approved proposal, and its result contract."""

    action = models.CharField(max_length=100)
    parameters = models.JSONField(default=dict)  # as shown: credentials masked
    # What runs, when ``parameters`` had a credential masked: {"parameters", "known"}, sealed.
    sealed = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: nothing sealed
    # The policy's secret_patterns when it was approved: its output is masked by them too.
    secret_patterns = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.QUEUED
    )
    queue = models.CharField(max_length=200, default="airlock")
    requested_by = models.CharField(max_length=200, blank=True)  # audit label of the agent
    command_hash = models.CharField(max_length=64)
    capabilities_used = models.JSONField(default=list)
    limits = models.JSONField(default=dict)

    backend = models.CharField(max_length=32, blank=True)
    worker_host = models.CharField(max_length=255, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    timed_out = models.BooleanField(default=False)
    truncated = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)  # image, runtime, isolation…
    output_bytes = models.PositiveBigIntegerField(default=0)
    last_seq = models.PositiveIntegerField(default=0)

    dispatch_count = models.PositiveIntegerField(default=0)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.CharField(max_length=200, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Carried out by the proposing agent (``tool.call``): lost if not reported by then.
    report_by = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Set when retention moved the output to the archive (executions.retention).
    output_archived_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ExecutionQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["status", "dispatched_at"]),
            models.Index(fields=["status", "heartbeat_at"]),
            models.Index(fields=["-created_at"]),
            # What retention still has to archive, oldest first (executions.retention).
            models.Index(
                fields=["finished_at"],
                condition=models.Q(output_archived_at__isnull=True),
                name="execution_output_kept",
            ),
        ]

    def __str__(self) -> str:
        return f"execution {self.pk} {self.action} {self.status}"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def success(self) -> bool:
        return self.status == ExecutionStatus.SUCCEEDED

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.finished_at:
            return int((self.finished_at - self.started_at).total_seconds() * 1000)
        return None

    def can_cancel(self) -> bool:
        return self.status in ACTIVE

    @property
    def waiting_for_host(self) -> str | None:
        """The host whose worker this queued host action waits for (no other host takes it)."""
        if self.status == ExecutionStatus.QUEUED and self.queue.startswith("host."):
            return self.queue.removeprefix("host.")
        return None

    def to_run(self) -> tuple[dict, list[str]]:
        """The parameters as the agent sent them, and the credential values its output must
        never show (unsealed: only a run, or the gateway carrying a call out, asks)."""
        if not self.sealed:
            return dict(self.parameters), []
        originals = unseal(self.sealed)
        return originals["parameters"], originals.get("known", [])

    def output_masker(self, known: list[str]) -> OutputMasker:
        """What masks this run's output as it is written: its known values, the patterns."""
        return OutputMasker(known, tuple(self.secret_patterns or ()))

    def output_text(self, stream: str) -> str:
        return "".join(
            self.chunks.filter(stream=stream).order_by("seq").values_list("data", flat=True)
        )


class OutputChunk(models.Model):
    """An ordered piece of an execution's output, persisted as it arrives."""

    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="chunks")
    seq = models.PositiveIntegerField()
    stream = models.CharField(max_length=6, choices=Stream.choices)
    data = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["execution", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["execution", "seq"], name="unique_chunk_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id}#{self.seq} {self.stream}"

    def as_message(self) -> dict:
        return {"seq": self.seq, "stream": self.stream, "data": self.data}


class SandboxSession(models.Model):
    """A persistent sandbox: an interpreter whose state survives between executes.

    The interpreter lives in one worker process; ``queue`` routes every
    execute to it. A session that ended (destroyed, idle, worker restarted)
    is never silently replaced: its state is gone, so executes fail clearly.
    """

    class Status(models.TextChoices):
        STARTING = "starting"  # created; a worker is opening the interpreter
        ACTIVE = "active"  # open in worker process ``worker_host``, reached through ``queue``
        CLOSED = "closed"  # destroyed, reaped when idle, or failed to start

    owner = models.CharField(max_length=200)  # audit label of the agent, e.g. "agent:bot"
    language = models.CharField(max_length=20, default="python")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.STARTING)
    backend = models.CharField(max_length=32, blank=True)
    worker_host = models.CharField(max_length=255, blank=True)
    queue = models.CharField(max_length=200, blank=True)
    runtime_id = models.CharField(max_length=64, blank=True)
    executes = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(auto_now_add=True)
    # When the owning worker process last said it is alive (its reaper, every 30 s).
    worker_seen_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["owner", "status"]),
            models.Index(fields=["status", "worker_host"]),
        ]

    def __str__(self) -> str:
        return f"session {self.pk} {self.language} {self.status}"
