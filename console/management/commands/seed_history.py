"""Seed a realistic history in bulk: what Airlock holds after a year of use, in minutes.

    manage.py seed_history 1000000 [--days 365] [--chunks 3] [--add]

N proposals spread evenly over the last ``--days`` days by three agents and
three kinds of action: 1 % still pending, 70 % approved with an execution
that ran (9 in 10 succeeded) and its output (``--chunks`` chunks), 15 %
rejected by a reviewer, 10 % expired, 4 % denied by policy; a reviewer's
decision for each one reviewed; and the audit records such a history makes
(submitted, decided, finished), chained and keyed as every record is, so
that ``verify_audit`` passes. Written in batches of 5,000 proposals, each in
one transaction that holds the audit chain's append lock. Refuses a database
that already holds proposals unless ``--add``.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.models import Agent, Decision, Proposal
from audit.models import AuditEvent
from audit.services import _CHAIN_END, GENESIS, _digest
from executions.models import Execution, OutputChunk
from infrastructure.appends import read_under_append_lock

BATCH = 5000
ACTIONS = [
    (
        "script.execute",
        {"language": "python", "code": "print('report')"},
        "python: print('report')",
    ),
    ("docker.inspect_container", {"container": "web-1"}, "inspect container web-1"),
    ("host.service_status", {"service_name": "nginx"}, "status of nginx"),
]
# Of every 100 proposals: (status, how many).
SHARES = [
    (ProposalStatus.PENDING, 1),
    (ProposalStatus.APPROVED, 70),
    (ProposalStatus.REJECTED, 15),
    (ProposalStatus.EXPIRED, 10),
    (ProposalStatus.DENIED, 4),
]
STATUS_OF = [status for status, share in SHARES for _ in range(share)]


class Command(BaseCommand):
    help = "Seed a realistic history of N proposals in bulk (to measure Airlock at scale)."

    def add_arguments(self, parser):
        parser.add_argument("count", type=int)
        parser.add_argument("--days", type=int, default=365)
        parser.add_argument("--chunks", type=int, default=3, help="output chunks per execution")
        parser.add_argument("--add", action="store_true", help="add to proposals already there")

    def handle(self, *args, count: int, days: int, chunks: int, add: bool, **options):
        if count < 1 or days < 1 or chunks < 0:
            raise CommandError("count and --days must be 1 or more, --chunks 0 or more")
        if Proposal.objects.exists() and not add:
            raise CommandError("this database already holds proposals: pass --add to add more")
        agents = [
            Agent.objects.get_or_create(
                name=f"seed-agent-{n}",
                defaults={"capabilities": ["*"], "token_hash": f"seed-{n}", "token_hint": "seed"},
            )[0]
            for n in range(3)
        ]
        reviewer = get_user_model().objects.get_or_create(username="seed-reviewer")[0]
        start = timezone.now() - timedelta(days=days)
        step = timedelta(seconds=days * 86400 / count)
        started = time.monotonic()
        for first in range(0, count, BATCH):
            with transaction.atomic():
                self._batch(first, min(first + BATCH, count), start, step, agents, reviewer, chunks)
            if (first // BATCH) % 20 == 19:
                self.stdout.write(f"{first + BATCH} proposals ({time.monotonic() - started:.0f} s)")
        self.stdout.write(f"seeded {count} proposals in {time.monotonic() - started:.0f} s")

    def _batch(self, first, last, start, step, agents, reviewer, chunks) -> None:
        rows = []
        for i in range(first, last):
            action, parameters, summary = ACTIONS[i % 3 if i % 5 else 0]
            status = STATUS_OF[(i * 37) % 100]
            created = start + step * i
            rows.append((i, action, parameters, summary, status, created, agents[i % 3]))
        ran = [row for row in rows if row[4] == ProposalStatus.APPROVED]
        executions = Execution.objects.bulk_create(
            Execution(
                action=action,
                parameters=parameters,
                status="succeeded" if i % 10 else "failed",
                command_hash=f"{i:064x}",
                requested_by=f"agent:{agent.name}",
                backend="local",
                exit_code=0 if i % 10 else 1,
                started_at=created + timedelta(seconds=1),
                finished_at=created + timedelta(seconds=2),
                output_bytes=chunks * 24,
                last_seq=chunks,
            )
            for i, action, parameters, summary, status, created, agent in ran
        )
        execution_of = {row[0]: execution for row, execution in zip(ran, executions, strict=True)}
        OutputChunk.objects.bulk_create(
            OutputChunk(execution=execution, seq=n + 1, stream="stdout", data=f"line {n} of run\n")
            for execution in executions
            for n in range(chunks)
        )
        proposals = Proposal.objects.bulk_create(
            Proposal(
                agent=agent,
                action=action,
                parameters=parameters,
                summary=summary,
                reason=f"routine check {i}",
                status=status,
                risk_score=(i * 7) % 11,
                risk_reasons=["seeded"],
                decision_path={"step": "review" if status != ProposalStatus.DENIED else "deny"},
                policy_version=1,
                approvals_count=1 if status == ProposalStatus.APPROVED and i % 2 else 0,
                execution=execution_of.get(i),
                created_at=created,
                expires_at=created + timedelta(hours=1),
                decided_at=None if status == ProposalStatus.PENDING else created + step / 2,
            )
            for i, action, parameters, summary, status, created, agent in rows
        )
        reviewed = [
            (proposal, row)
            for proposal, row in zip(proposals, rows, strict=True)
            if row[4] == ProposalStatus.REJECTED
            or (row[4] == ProposalStatus.APPROVED and row[0] % 2)
        ]
        Decision.objects.bulk_create(
            Decision(
                proposal=proposal,
                reviewer=reviewer,
                kind="reject" if row[4] == ProposalStatus.REJECTED else "approve",
            )
            for proposal, row in reviewed
        )
        self._audit(proposals, rows, execution_of)

    def _audit(self, proposals, rows, execution_of) -> None:
        """The records the history makes, appended to the chain under its lock."""
        end = read_under_append_lock(_CHAIN_END)
        seq, prev = end[0] if end else (0, GENESIS)
        events = []
        for proposal, (i, action, _, _, status, created, agent) in zip(
            proposals, rows, strict=True
        ):
            said = [("agent:" + agent.name, "proposal.submitted", "proposal", proposal.pk, created)]
            if status != ProposalStatus.PENDING:
                said.append(("user:seed-reviewer", f"proposal.{status}", "proposal", proposal.pk,
                             proposal.decided_at))  # fmt: skip
            if i in execution_of:
                execution = execution_of[i]
                said.append(("system", f"execution.{execution.status}", "execution", execution.pk,
                             execution.finished_at))  # fmt: skip
            for actor, verb, object_type, object_id, at in said:
                seq += 1
                data = {"action": action}
                digest = _digest(prev, seq, at, actor, verb, object_type, str(object_id), data)
                events.append(
                    AuditEvent(
                        seq=seq,
                        created_at=at,
                        actor=actor,
                        verb=verb,
                        object_type=object_type,
                        object_id=str(object_id),
                        data=data,
                        prev_hash=prev,
                        hash=digest,
                    )
                )
                prev = digest
        AuditEvent.objects.bulk_create(events, batch_size=2000)
