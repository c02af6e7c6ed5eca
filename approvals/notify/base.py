"""What every notification channel shares: the event it is told, and the interface it implements.

A channel is a ``Notifier``: it says which kinds of event it takes
(``wants``) and sends a batch of them (``send_all``). Channels are listed in
the ``NOTIFIERS`` setting and never import each other; what they send goes
through the delivery log (``deliveries``) when it can fail and be retried.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from datetime import datetime

from django.conf import settings
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from approvals.models import Proposal
from approvals.policy.risk import top_reasons
from executions.actions import target_text

log = logging.getLogger(__name__)

KINDS = {
    "notify_list": "ran from the notify list",
    "review_requested": "waits for review",
    "expiry_warning": "expires soon",
    "decided": "was decided",
    "partly_approved": "has an approval and waits for more",
    "execution_ended": "finished running",
    "escalated": "was escalated: a required team has not answered",
    "break_glass": "was decided by an admin breaking the glass",
    "withdrawn": "was withdrawn by its agent: nothing will run",
    "agent_paused": (
        "was rejected, the last of a run of rejections: its agent is paused until an admin "
        "resumes it"
    ),
}
TOLD = frozenset(
    {
        "notify_list",
        "review_requested",
        "expiry_warning",
        "decided",
        "escalated",
        "break_glass",
        "withdrawn",
        "agent_paused",
    }
)
# Only keep messages already posted up to date: taken by channels that post such messages.
FOLLOW_UPS = frozenset({"partly_approved", "execution_ended"})
# Mails to reviewers about these carry a one-tap review link while the proposal waits;
# of a routed proposal, only those its route lets decide hear of them.
REVIEW_KINDS = frozenset({"review_requested", "expiry_warning", "escalated"})


@dataclass(frozen=True)
class Event:
    kind: str
    proposal_id: int
    status: str
    action: str
    agent: str
    summary: str
    risk: int
    url: str
    at: str
    teams: tuple[str, ...] = ()  # a routed proposal's teams this is for (approvals.routing)
    reason: str = ""  # the agent's, on one line
    target: str = ""  # what it acts on: "container web-1", "service nginx · host host-a"
    risks: tuple[str, ...] = ()  # the strongest reasons but the action's base risk

    @property
    def subject(self) -> str:
        return f"[Airlock] proposal {self.proposal_id} {KINDS.get(self.kind, self.kind)}: {self.summary}"[
            :200
        ]

    @property
    def text(self) -> str:
        return (
            f"Proposal {self.proposal_id} by {self.agent} {KINDS.get(self.kind, self.kind)}.\n"
            f"Action: {self.action}\n"
            + (f"Target: {self.target}\n" if self.target else "")
            + f"Summary: {self.summary}\n"
            + (f"Why (the agent's reason): {self.reason}\n" if self.reason else "")
            + f"Risk: {self.risk}\n"
            + "".join(f"  - {risk}\n" for risk in self.risks)
            + f"Status: {self.status}\n\n{self.url}\n"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def proposal_url(proposal_id: int) -> str:
    try:
        path = reverse("console:proposal", args=[proposal_id])
    except NoReverseMatch:
        path = f"/proposals/{proposal_id}/"
    return f"{settings.SITE_URL}{path}"


EVENT_FIELDS = (
    "status",
    "action",
    "summary",
    "reason",
    "parameters",
    "risk_score",
    "risk_reasons",
    "routing",
    "agent__name",
)  # what event_for reads


def event_for(kind: str, proposal: Proposal, at: datetime | None = None) -> Event:
    return Event(
        kind=kind,
        proposal_id=proposal.pk,
        status=proposal.status,
        action=proposal.action,
        agent=proposal.agent.name,
        summary=proposal.summary,
        risk=proposal.risk_score,
        url=proposal_url(proposal.pk),
        at=(at or timezone.now()).isoformat(),
        teams=teams_told(kind, proposal),
        reason=" ".join(proposal.reason.split())[:300],
        target=target_text(proposal.action, proposal.parameters),
        risks=tuple(top_reasons(proposal.action, proposal.risk_reasons)),
    )


def teams_told(kind: str, proposal: Proposal) -> tuple[str, ...]:
    """The teams an event of a routed proposal is for: those it escalates to, or its own."""
    routing = proposal.routing or {}
    if kind == "escalated":
        return tuple(routing.get("escalate_to", ()))
    return tuple(routing.get("require", {}))


class Notifier(ABC):
    """Sends one event somewhere. Must not raise for a delivery problem; log it."""

    kinds: frozenset[str] = TOLD

    def wants(self, kind: str) -> bool:
        return kind in self.kinds

    @abstractmethod
    def send(self, event: Event) -> None: ...

    def send_all(self, events: list[Event]) -> None:
        """A batch, in order. Notifiers override it where a batch can share work."""
        self.each(events, self.send)

    def each(self, events: list[Event], tell) -> None:
        """``tell(event)`` for each event; one's failure is logged and the others still go out."""
        for event in events:
            try:
                tell(event)
            except Exception:
                log.exception("%s failed for proposal %s", type(self).__name__, event.proposal_id)
