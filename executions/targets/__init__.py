"""The live state of what a proposal would act on, read when a reviewer opens its page.

Owns ``read(action, parameters)``: the state of the proposal's target as it is
now — for a Docker action the container as the engine describes it
(``containers``: status, image, started at, restart count, health), for a host
service action the unit as systemd describes it (``systemd``) — or None when
the action has no target whose state can be read (a script, a tool call, a
network prune). One reader per kind of target, each a function from the
proposal's parameters to a ``base.TargetState``, behind ``READERS``.

Every read is read-only and bounded: ``base.within`` gives it
``base.READ_SECONDS`` and answers "unknown", with why, past that or on any
failure, so the page always renders, and fast. It reads through the same
paths the actions use: the engine ``DOCKER_HOST`` names (in the compose
deployment, the Docker gate, which lets a container's inspect through for the
containers Docker actions may touch), and the host actions' own way of running
``HOST_ACTIONS_SYSTEMCTL``; a service on another host by that host's worker,
asked through the broker while the page waits (``remote``: the read on the
host's queue, the answer on a Redis list; ``answer`` is the worker's side).

May import ``executions.actions`` (the catalog, the actions' parameter patterns,
the host actions' argument runner), ``executions.sandboxes`` (the sandbox label,
an output sink), ``dockergate.targets`` and ``infrastructure`` (the enqueue);
never the database. The reviewers' pages (``approvals.review``) call it.
"""

from __future__ import annotations

import logging

from executions.actions import get_action

from . import containers, remote, systemd
from .base import READ_SECONDS, Fact, Reader, TargetState, within

# The kind of target an action names (``ActionSpec.targets``) -> what reads its state.
log = logging.getLogger(__name__)

READERS: dict[str, Reader] = {reader.kind: reader for reader in (containers.READER, systemd.READER)}
# The kinds another host's worker reads for a page (``remote``), and how it reads them there.
READ_HERE = {systemd.KIND: systemd.here}


def reader_for(action: str) -> Reader | None:
    """What reads the live state of ``action``'s target, or None when nothing does."""
    spec = get_action(action)
    if spec is None or spec.sandboxed:
        return None
    return next((READERS[kind] for kind in spec.targets if kind in READERS), None)


def read(action: str, parameters: dict, seconds: float = READ_SECONDS) -> TargetState | None:
    """The live state of the proposal's target within ``seconds``, or None if it has none."""
    reader = reader_for(action)
    if reader is None or not isinstance(parameters, dict):
        return None
    return within(reader, parameters, seconds)


def answer(kind: str, parameters: dict, seconds: float, key: str) -> None:
    """Read the ``kind`` target on this host and push its state to the page waiting on ``key``."""
    blank = TargetState(kind, str(parameters.get("service_name", "")))
    try:
        state = (
            READ_HERE[kind](parameters, seconds)
            if kind in READ_HERE
            else blank.unknown(f"no worker reads a {kind}'s state")
        )
    except Exception as exc:  # the page is told, not left waiting out its second
        log.exception("reading the state of %s %s for a page failed", kind, blank.name)
        state = blank.unknown(f"could not be read: {exc}"[:300])
    remote.answer(key, state)


__all__ = [
    "READERS",
    "answer",
    "READ_SECONDS",
    "Fact",
    "Reader",
    "TargetState",
    "read",
    "reader_for",
]
