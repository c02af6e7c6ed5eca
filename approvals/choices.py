from django.db import models


class ProposalStatus(models.TextChoices):
    PENDING = "pending"  # held for reviewers
    APPROVED = "approved"  # by policy or reviewers; has exactly one execution
    DENIED = "denied"  # by policy: deny list, missing capability
    REJECTED = "rejected"  # by a reviewer
    EXPIRED = "expired"  # nobody decided before the review timeout; counts as a rejection
    WITHDRAWN = "withdrawn"  # the proposing agent took it back before a decision


ACTIVE = frozenset({ProposalStatus.PENDING})
TERMINAL = frozenset(
    {
        ProposalStatus.APPROVED,
        ProposalStatus.DENIED,
        ProposalStatus.REJECTED,
        ProposalStatus.EXPIRED,
        ProposalStatus.WITHDRAWN,
    }
)
TRANSITIONS = {
    ProposalStatus.PENDING: frozenset(
        {
            ProposalStatus.APPROVED,
            ProposalStatus.REJECTED,
            ProposalStatus.EXPIRED,
            ProposalStatus.WITHDRAWN,
        }
    ),
}

# What a long-poll waits for (``?until=``): any change of what it read, a decision, or the end.
CHANGE, DECIDED, FINISHED = "change", "decided", "finished"
UNTIL = (CHANGE, DECIDED, FINISHED)


# Risk bands, as the queue filters by them and reviewers choose what to hear about.
RISK_BANDS = {
    "low": (0, 3),
    "medium": (4, 6),
    "high": (7, 10),
}


def risk_band(score: int) -> str:
    """The band a risk score falls in (scores above the scale count as high)."""
    return next((band for band, (_, high) in RISK_BANDS.items() if score <= high), "high")


class Urgency(models.TextChoices):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    CRITICAL = "critical"


class DecisionKind(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"


class DecisionStep(models.TextChoices):
    INVALID = "invalid"
    CAPABILITY = "capability"
    DENY_LIST = "deny_list"
    ALLOW_LIST = "allow_list"
    NOTIFY_LIST = "notify_list"
    PREVALIDATOR = "prevalidator"
    RISK = "risk"
    REVIEW = "review"
    WEAK_SANDBOX = "weak_sandbox"  # policy would approve, but the sandbox in force is weak
