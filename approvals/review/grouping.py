"""Identical pending proposals as one queue row: the same agent, action and parameters (an
agent retrying, the same check asked again). One decision settles the row, each of its
proposals decided by its own rules (``approvals.core.batch``).

A proposal that carries sealed credentials is never grouped: its masked parameters may
look like another's while the originals differ.
"""

from __future__ import annotations

import json

from approvals.models import Proposal


def group_identical(proposals: list[Proposal]) -> list[Proposal]:
    """``proposals`` with each set of identical ones folded into its first (in the queue's
    order): that one carries ``group`` (the ids of all of them, itself first); every
    proposal carries ``group`` (a single one, its own id)."""
    rows: list[Proposal] = []
    first_of: dict[tuple, Proposal] = {}
    for proposal in proposals:
        key = _key(proposal)
        lead = first_of.get(key) if key is not None else None
        if lead is None:
            proposal.group = [proposal.pk]
            rows.append(proposal)
            if key is not None:
                first_of[key] = proposal
        else:
            lead.group.append(proposal.pk)
    return rows


def _key(proposal: Proposal) -> tuple | None:
    if proposal.sealed:
        return None
    parameters = json.dumps(proposal.parameters, sort_keys=True, separators=(",", ":"))
    return proposal.agent_id, proposal.action, parameters
