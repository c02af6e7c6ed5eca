"""The reviewers' live console: ``/ws/queue/`` pushes htmx out-of-band fragments.

Every message is HTML for the htmx ws extension: elements with stable ids
(``#queue-list``, ``#pending-count``, ``#proposal-state``, ``#decide-area``),
rendered from the same partials the pages include, each marked
``hx-swap-oob``. The query string says what the page shows:

- ``/ws/queue/?agent=…&action=…&risk=…&q=…`` — the queue with those filters;
- ``/ws/queue/?proposal=N`` — one proposal's decision panel;
- ``/ws/queue/?shell=1`` — the badge and the notices alone, for every other page
  (the tab's title count and browser notifications come of them).

A fresh snapshot goes out on connect, so a browser that reconnects after a
drop is up to date without replaying anything (the database is the truth).

Changes are pushed as fresh renders, not one render per change: the first
change goes out at once, and the changes and notices that arrive while it
renders or in the pause after it go out together in one frame (of a burst's
notices, the newest ``NOTICES_PER_PUSH``; the queue shows them all). The
pause is at least ``PUSH_INTERVAL_SECONDS`` and ``PAUSE_PER_RENDER`` times
what the render took (at most ``MAX_PAUSE_SECONDS``), so that an open
console spends about a twentieth of the time rendering however fast
proposals come (a full queue is 200 rows, some 60 ms to render here; one
render per change let two open consoles take the web processes from the
agents: 54-64 proposals/s instead of about 300).
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.http import QueryDict
from django.template.loader import render_to_string
from django.utils import timezone

from accounts.roles import is_reviewer
from approvals.core import services
from approvals.models import Proposal
from approvals.notify.base import REVIEW_KINDS
from approvals.notify.models import preferences_for
from approvals.review.views.proposals import proposal_context, queue_context
from executions.broadcast import PROPOSALS_GROUP

CLOSE_FORBIDDEN = 4403
PUSH_INTERVAL_SECONDS = 0.25
PAUSE_PER_RENDER = 20
MAX_PAUSE_SECONDS = 2.0  # however slow the host, a console is never further behind
NOTICES_PER_PUSH = 5  # as many as a console page keeps (static/console/console.js)
OWED_NOTICES = 1000
FULL, BADGE = "full", "badge"  # what a push renders: the page's part, or the badge only


class QueueConsumer(AsyncWebsocketConsumer):
    proposal_id: int | None = None
    _wanted: str | None = None  # the push owed for changes not rendered yet
    _pusher: asyncio.Task | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not await database_sync_to_async(is_reviewer)(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user = user
        self.params = QueryDict(self.scope.get("query_string", b"").decode("latin-1"))
        self.proposal_id = _proposal_id(self.scope.get("query_string", b""))
        self.shell = self.params.get("shell") == "1"
        self._notices: list[dict] = []  # owed, like _wanted
        await self.accept()
        await self.channel_layer.group_add(PROPOSALS_GROUP, self.channel_name)
        await self.push()

    async def disconnect(self, code: int) -> None:
        if self._pusher is not None:
            self._pusher.cancel()
        await self.channel_layer.group_discard(PROPOSALS_GROUP, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        pass  # one-way: decisions go through the console's forms

    async def proposal_changed(self, event: dict) -> None:
        if self.proposal_id is None or event.get("proposal_id") == self.proposal_id:
            self.push_soon(FULL)
        else:
            self.push_soon(BADGE)

    async def execution_changed(self, event: dict) -> None:
        # Only a proposal page shows an execution's status (its link).
        if self.proposal_id is not None:
            self.push_soon(FULL)

    async def agents_changed(self, event: dict) -> None:
        # Agents paused or resumed (approvals.core.pausing): the queue marks their rows.
        self.push_soon(FULL)

    def push_soon(self, wanted: str) -> None:
        """Owe a push of ``wanted``; made at once unless one was made just before."""
        self._wanted = FULL if FULL in (wanted, self._wanted) else BADGE
        self._start_pushing()

    async def notifications(self, message: dict) -> None:
        """Notices from ``approvals.notify.outbox`` (a drained batch a message): those
        this reviewer wants go to the top of every console page, in order."""
        self._notices += [
            event
            for event in message.get("events") or ()
            if isinstance(event, dict)
            and isinstance(event.get("proposal_id"), int)
            # This page shows that proposal live; a notice would only cover it.
            and event["proposal_id"] != self.proposal_id
        ]
        if self._notices:
            del self._notices[:-OWED_NOTICES]  # a console that cannot keep up keeps the newest
            self._start_pushing()

    def _start_pushing(self) -> None:
        if self._pusher is None or self._pusher.done():
            self._pusher = asyncio.create_task(self._push_owed())

    async def _push_owed(self) -> None:
        while self._wanted is not None or self._notices:
            wanted, notices = self._wanted, self._notices
            self._wanted, self._notices = None, []
            started = time.monotonic()
            html = await database_sync_to_async(self.render_owed)(wanted, notices)
            if html:
                await self.send(text_data=html)
            took = time.monotonic() - started
            # What arrives meanwhile goes out next, in one frame.
            pause = max(PUSH_INTERVAL_SECONDS, PAUSE_PER_RENDER * took)
            await asyncio.sleep(min(pause, MAX_PAUSE_SECONDS))

    def render_owed(self, wanted: str | None, notices: list[dict]) -> str:
        parts = [self.render(badge_only=wanted == BADGE)] if wanted is not None else []
        if notices:
            parts.append(self.render_notices(notices))
        return "".join(parts)

    def render_notices(self, events: list[dict]) -> str:
        """The notices the person's preferences let through (console notices, their risk
        bands, outside quiet hours), rendered to be prepended one after another. What asks
        for a decision (a request for review, an expiry warning, an escalation) reaches only
        those who may decide it now (its route's teams, not its agent's owner)."""
        preferences, now = preferences_for(self.user), timezone.now()
        asks = any(event.get("kind") in REVIEW_KINDS for event in events)
        theirs = set(services.awaiting(self.user)) if asks else set()
        wanted = [
            event
            for event in events
            if preferences.wants(
                "console", event["risk"] if isinstance(event.get("risk"), int) else 0, now
            )
            and (event.get("kind") not in REVIEW_KINDS or event["proposal_id"] in theirs)
        ]
        return "".join(
            render_to_string("console/base.html#notice", {"notice": event, "oob": True})
            for event in wanted[-NOTICES_PER_PUSH:]
        )

    async def push(self, badge_only: bool = False) -> None:
        html = await database_sync_to_async(self.render)(badge_only)
        if html:
            await self.send(text_data=html)

    def render(self, badge_only: bool = False) -> str:
        """The nav badge (what waits for this reviewer) and, unless only that is owed, the
        page's own part."""
        if badge_only or self.shell or self.proposal_id is not None:
            parts = [_badge(len(services.awaiting(self.user)))]
            if not (badge_only or self.shell):
                parts.extend(self._render_proposal())
            return "".join(parts)
        return "".join(self._render_queue())

    def _render_queue(self) -> list[str]:
        """The badge, the list and the tabs' counts (each its own out-of-band swap)."""
        pending = Proposal.objects.pending().count()
        context = {**queue_context(self.params, self.user), "pending_count": pending, "oob": True}
        return [_badge(context["mine_count"])] + [
            render_to_string(f"approvals/queue.html#{part}", context)
            for part in ("queue-counts", "queue-list")
        ]

    def _render_proposal(self) -> list[str]:
        proposal = (
            Proposal.objects.select_related("agent", "execution")
            .prefetch_related("decisions__reviewer")
            .filter(pk=self.proposal_id)
            .first()
        )
        if proposal is None:
            return []
        context = {**proposal_context(proposal, self.user), "oob": True}
        parts = [render_to_string("approvals/detail.html#proposal-state", context)]
        if not proposal.is_pending or context["decided_by_user"]:
            # The forms go once nothing is left to decide; while it is pending
            # they stay, so a comment being typed is never wiped.
            parts.append(render_to_string("approvals/detail.html#decide-area", context))
        return parts


def _badge(awaiting: int) -> str:
    return render_to_string(
        "console/base.html#pending-badge", {"awaiting_count": awaiting, "oob": True}
    )


def _proposal_id(query_string: bytes) -> int | None:
    values = parse_qs(query_string.decode("latin-1")).get("proposal")
    if not values or not (values[0].isascii() and values[0].isdigit()):
        return None
    return int(values[0])
