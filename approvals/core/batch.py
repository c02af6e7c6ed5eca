"""Many decisions at once: one reviewer, one kind, one comment, a result per proposal.

Each proposal is decided as if alone (``services.decide``: its route, quorum,
self-approval rule, step-up and audit entry are its own), in its own
transaction, so one that cannot be decided leaves the others decided. One
fresh second factor covers the batch: it is the reviewer's, not a proposal's.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse

from accounts.stepup import Authentication
from approvals.core import services

MAX_IDS = 100


def decide_many(
    ids: list[int], reviewer, kind: str, comment: str, *, authentication: Authentication
) -> list[dict]:
    """``[{"id", "status"} | {"id", "error": {"type", "message"[, "url"]}}]`` in the order
    of ``ids`` (each once). A proposal that needs a fresh factor the reviewer lacks is
    refused ``step_up_required`` with the console's page that decides all of those at once."""
    results, unproved = [], []
    for pk in dict.fromkeys(ids):
        try:
            proposal = services.decide(pk, reviewer, kind, comment, authentication=authentication)
        except services.ProposalError as exc:
            if exc.kind == "step_up_required":
                unproved.append(pk)
            results.append({"id": pk, "error": {"type": exc.kind, "message": exc.message}})
        else:
            results.append({"id": pk, "status": proposal.status})
    if unproved:
        url = batch_url(kind, unproved, comment)
        for result in results:
            if result["id"] in unproved:
                result["error"]["url"] = url
    return results


def batch_url(kind: str, ids: list[int], comment: str = "") -> str:
    """The console page that decides ``ids`` together after one step-up, the comment kept."""
    query = {"ids": ",".join(str(pk) for pk in ids), **({"comment": comment} if comment else {})}
    path = reverse("console:decide-many", args=[kind])
    return f"{settings.SITE_URL}{path}?{urlencode(query)}"
