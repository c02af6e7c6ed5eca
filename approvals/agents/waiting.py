"""Long-poll (``GET /api/v1/proposals/{id}?wait=N``) without a query loop and a connection per waiter.

The read itself is the DRF view. What waits is asynchronous: every waiting
call of a process registers with one ``ProposalWatcher`` for its event loop.
The watcher listens to the ``proposals`` group of the channel layer, to which
every change of a proposal or its execution is broadcast after commit. A
message that carries the new state (a proposal's, or its execution's status)
wakes the calls that saw another one at once, without a read; each call's
view reads again and waits on if nothing changed after all (a late message).
Otherwise (any other message, a call that registers, and every
``SAFETY_SECONDS`` whatever happens) it reads the state of all watched proposals in a single query, on
one thread with one database connection, and wakes the calls whose proposal
changed. A thousand waiting agents cost one query per change and no database
connection each (PostgreSQL's default allows 100), and a decision reaches its
waiters as soon as it is broadcast, not at the next tick of a poll.

A message that tells of an execution moving on (started, ended) is the
answer itself: once a proposal has its execution nothing else in its answer
changes, and an execution only moves forward. That call answers without
asking the view again, which is how the waits of a proposal → result end.

List calls (``GET /api/v1/proposals?wait=N``, ``wait_for_rows``) wait with
the same watcher for a row: each says what could give it one (``Interest``)
and where the audit trail ended before its read; a broadcast wakes only those
its proposal concerns, and a tick reads the audit trail past what they have
seen once for all of them (``changes_since``): a thousand idle lists cost one
query a tick, not a thousand.

The watcher outlives its last waiter by ``LINGER_SECONDS``: an agent that
polls call after call finds it subscribed, with its thread and connection,
instead of paying for a new subscription and connection each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import weakref
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections, connection, connections

from approvals.agents.changes import Interest, changes_since, marker
from approvals.choices import CHANGE, DECIDED, FINISHED, ProposalStatus
from approvals.models import Proposal
from executions.broadcast import PROPOSALS_GROUP
from executions.choices import TERMINAL, ExecutionStatus
from infrastructure.handler import RUNS_ON_POOL, WAITS_OFF_THREAD
from infrastructure.rest.errors import ApiError

log = logging.getLogger(__name__)
SAFETY_SECONDS = 1.0  # a read even without a message: broadcasts are at-most-once
RECEIVE_RETRY_SECONDS = 1.0  # after the channel layer failed a receive
LINGER_SECONDS = 30.0  # how long the watcher stays up, subscribed, with nobody waiting
ENDED = (
    ProposalStatus.DENIED,
    ProposalStatus.REJECTED,
    ProposalStatus.EXPIRED,
    ProposalStatus.WITHDRAWN,
)

Fingerprint = tuple  # (status, approvals, execution id, execution status)
_FINGERPRINT = ("status", "approvals", "execution_id", "execution_status")  # message fields


def fingerprint_of(data: dict) -> Fingerprint:
    """The fingerprint of a proposal as the API serialized it."""
    return (data["status"], data["approvals"], data["execution_id"], data["execution_status"])


def fingerprints(ids: Iterable[int]) -> dict[int, Fingerprint]:
    rows = Proposal.objects.filter(pk__in=list(ids)).values_list(
        "pk", "status", "approvals_count", "execution_id", "execution__status"
    )
    return {pk: tuple(rest) for pk, *rest in rows}


def settled(fingerprint: Fingerprint) -> bool:
    """Whether nothing will change any more: decided against, or its execution finished."""
    status, _, _, execution_status = fingerprint
    return status in ENDED or execution_status in TERMINAL


class ProposalWatcher:
    """Wakes waiters of one event loop when their proposal's fingerprint changes, and list
    calls when a change could give them a row."""

    def __init__(self, interval: float = SAFETY_SECONDS):
        self.interval = interval
        self.linger = LINGER_SECONDS
        self._waiters: dict[int, dict[asyncio.Future, Fingerprint]] = defaultdict(dict)
        # List calls: (what they could get a row from, the audit trail's end they have seen).
        self._lists: dict[asyncio.Future, list] = {}
        self._task: asyncio.Task | None = None
        self._kick = asyncio.Event()

    @property
    def watching(self) -> int:
        return sum(len(w) for w in self._waiters.values()) + len(self._lists)

    async def rows_may_appear(self, timeout: float, interest: Interest, seen: int) -> int | None:
        """The audit trail's end once a change that ``interest`` wants is told (a message) or
        read (past ``seen``, at a tick); None after ``timeout`` seconds. The caller reads
        again to know, and waits on from there."""
        future = asyncio.get_running_loop().create_future()
        self._lists[future] = [interest, seen]
        self._start()
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._lists.pop(future, None)
            if not self._waiters and not self._lists:
                self._kick.set()

    def _start(self) -> None:
        if self._task is None:
            # A context of its own, not the first waiting request's (see the
            # channel layer's poller: a request's executor ends with it).
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="proposal-watcher", context=contextvars.Context()
            )

    async def wait_for_change(self, pk: int, seen: Fingerprint, timeout: float) -> bool:
        """True when the proposal changed from ``seen`` within ``timeout`` seconds."""
        return await self.next_state(pk, seen, timeout) is not None

    async def next_state(self, pk: int, seen: Fingerprint, timeout: float) -> Fingerprint | None:
        """The fingerprint that woke the call (read, or told by a message; a message may be
        late, so only what cannot change any more is certain); None after ``timeout`` seconds.
        """
        future = asyncio.get_running_loop().create_future()
        self._waiters[pk][future] = seen
        self._kick.set()  # read soon: it may have changed since the caller's read
        self._start()
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            waiting = self._waiters.get(pk)
            if waiting is not None:
                waiting.pop(future, None)
                if not waiting:
                    del self._waiters[pk]
            if not self._waiters and not self._lists:
                self._kick.set()  # the watcher starts its linger (or ends) now

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        # One thread, so one database connection, whatever the number of waiters.
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proposal-watcher")
        changes = _Changes()
        try:
            await changes.subscribe()
            message = None  # the first pass reads
            idle_since: float | None = None
            while True:
                self._kick.clear()
                timeout = self.interval
                if not self._waiters and not self._lists:
                    idle_since = idle_since or time.monotonic()
                    left = idle_since + self.linger - time.monotonic()
                    if left <= 0:
                        break
                    timeout = min(timeout, left)
                else:
                    idle_since = None
                    if self._waiters and not self._wake_named(message):
                        try:
                            watched = list(self._waiters)
                            current = await loop.run_in_executor(executor, _read, watched)
                        except Exception:
                            log.exception("watching proposals for long-polls failed; retrying")
                            current = {}
                        self._wake(current)
                message = await changes.next(self._kick, timeout)
                if self._lists:
                    await self._wake_lists(message, loop, executor)
        finally:
            # Before any await: a waiter that registers from now on starts a new watcher.
            if self._task is asyncio.current_task():
                self._task = None
            await changes.unsubscribe()
            # Looked up on the watcher's thread: it closes that thread's connection.
            await loop.run_in_executor(executor, connections.close_all)
            executor.shutdown(wait=False)

    async def _wake_lists(self, message: dict | None, loop, executor) -> None:
        """Wake the list calls a change could give a row: told by ``message``, or read from
        the audit trail at a tick (one query for all of them, two when something changed)."""
        if isinstance(message, dict):
            if message.get("type") != "proposal.changed":
                return  # a run moving on, a notice, an agent paused: no proposal to any list
            told = None
            if {"agent_id", "status"} <= message.keys():
                told = (message["agent_id"], message["status"])
            for future, (interest, seen) in self._lists.items():
                if not future.done() and (told is None or interest.wants(*told)):
                    future.set_result(seen)  # the tick reads past it again: at most twice
            return
        low = min(seen for _, seen in self._lists.values())
        try:
            end, found = await loop.run_in_executor(executor, changes_since, low)
        except Exception:
            log.exception("reading changes for waiting lists failed; retrying")
            return
        for future, entry in self._lists.items():
            interest, seen = entry
            if future.done() or seen < low:
                continue  # came while this was read, from before it: the next tick reads for it
            if any(seq > seen and interest.wants(agent, status) for seq, agent, status in found):
                future.set_result(end)
            else:
                entry[1] = max(seen, end)

    def _wake_named(self, message: dict | None) -> bool:
        """Wake the calls that ``message`` says saw an old state; False: read to know."""
        if not isinstance(message, dict):
            return False
        kind = message.get("type")
        if kind == "proposal.changed" and all(field in message for field in _FINGERPRINT):
            now = tuple(message[field] for field in _FINGERPRINT)
            waiting = self._waiters.get(message["proposal_id"], {})
            woken = [(future, now) for future, seen in waiting.items() if seen != now]
        elif kind == "execution.changed" and {"execution_id", "status"} <= message.keys():
            woken = [
                (future, (*seen[:3], message["status"]))
                for waiting in self._waiters.values()
                for future, seen in waiting.items()
                if seen[2] == message["execution_id"] and seen[3] != message["status"]
            ]
        else:
            return False
        for future, now in woken:
            if not future.done():
                future.set_result(now)
        return True

    def _wake(self, current: dict[int, Fingerprint]) -> None:
        for pk, waiting in self._waiters.items():
            now = current.get(pk)
            if now is None:
                continue  # not visible (yet) to this connection: nothing to report
            for future, seen in waiting.items():
                if now != seen and not future.done():
                    future.set_result(now)


class _Changes:
    """The watcher's subscription to the ``proposals`` group of the channel layer."""

    def __init__(self):
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self._receiving: asyncio.Future | None = None
        self._retry_at = 0.0  # after a failed receive (the layer away), not before this

    async def subscribe(self) -> None:
        if self.layer is None:
            return
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(PROPOSALS_GROUP, self.channel)
        except Exception:  # then the watcher falls back to reading every interval
            log.exception("long-polls cannot listen to the channel layer; reading on a timer")
            self.channel = None

    async def next(self, kick: asyncio.Event, timeout: float) -> dict | None:
        """The message of a broadcast change; None on a kick or after ``timeout`` seconds."""
        waits = [asyncio.ensure_future(kick.wait())]
        if self.channel is not None:
            retry_in = self._retry_at - time.monotonic()
            if retry_in > 0:
                timeout = min(timeout, retry_in)  # receive again then, not a whole timeout later
            else:
                if self._receiving is None or self._receiving.done():
                    self._receiving = asyncio.ensure_future(self.layer.receive(self.channel))
                waits.append(self._receiving)
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        waits[0].cancel()
        received = self._receiving
        if received not in done or received.cancelled():
            return None
        self._receiving = None
        if received.exception() is not None:
            # The layer is away (Redis restarting): a receive fails at once, and
            # trying again at once would spin the event loop that serves every
            # request. Until the next try the watcher reads on its safety timer.
            log.warning("channel layer receive failed: %s", received.exception())
            self._retry_at = time.monotonic() + RECEIVE_RETRY_SECONDS
            return None
        return received.result()

    async def unsubscribe(self) -> None:
        if self._receiving is not None:
            self._receiving.cancel()
        if self.channel is not None:
            with contextlib.suppress(Exception):
                await self.layer.group_discard(PROPOSALS_GROUP, self.channel)


def _read(ids: list[int]) -> dict[int, Fingerprint]:
    close_old_connections()  # a connection the database dropped is replaced, not reused
    try:
        return fingerprints(ids)
    except Exception:
        connection.close()
        raise


_watchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ProposalWatcher] = (
    weakref.WeakKeyDictionary()
)


def watcher() -> ProposalWatcher:
    """The watcher of the running event loop."""
    loop = asyncio.get_running_loop()
    if loop not in _watchers:
        _watchers[loop] = ProposalWatcher()
    return _watchers[loop]


def long_poll(view, read_again=None, methods=("GET", "HEAD", "POST"), finish=None):
    """Wrap a view that answers a proposal: with ``?wait=N`` hold its answer until a change.

    The view authenticates, validates ``wait`` and serializes. Under Airlock's
    ASGI handler the call then waits without a thread or a connection: the
    response carries ``long_poll``, which the handler awaits before it asks
    the view again. On a plain thread (WSGI, the test client) it waits there.
    A wake is a hint: the view's own read decides whether the proposal
    changed, and if it did not the call waits out what is left of its time.

    ``?until=decided`` or ``?until=finished`` waits past the steps on the way
    (approvals, the execution starting) for the decision or the end; a step a
    message tells needs no read, so a proposal → result is one call.

    A view that makes the proposal (a POST) is not asked again: after it,
    ``read_again(user, pk)`` reads the proposal into the same response.
    Only calls of ``methods`` wait (the other methods of the view answer a list).
    A call that waited ``until=finished`` for a run that ended gets what
    ``finish(user, data)`` adds to its answer (the run's result: one call, not two).
    """

    def finished(response, until: str, user) -> object:
        data = response.data
        ran = data.get("execution_id") is not None  # denied or rejected: no run, no result
        if finish is not None and until == FINISHED and ran and settled(fingerprint_of(data)):
            retell(response, **finish(user, data))
        return response

    def waiting_view(request, *args, **kwargs):
        state: _Waiting | None = getattr(request, "_long_poll", None)
        if state is not None and read_again is not None:
            response = state.response
            response.long_poll = None  # the answer of an earlier pass: its wait is over
            try:
                # As the user the view authenticated: this pass's middleware knows only the session.
                retell(response, **read_again(state.user, state.pk))
            except ApiError:
                return response  # not readable any more (say, the agent removed): as it was
        else:
            response = view(request, *args, **kwargs)
        if request.method not in methods or response.status_code not in (200, 201):
            return response
        now = fingerprint_of(response.data)
        if state is None:
            wait = float(request.GET.get("wait") or 0)  # the view answered 400 to bad ones
            until = request.GET.get("until") or CHANGE
            if not wait or settled(now) or (until != CHANGE and reached(until, now, now)):
                return finished(response, until, request.user)
            state = _Waiting(
                first=now,
                seen=now,
                until=until,
                deadline=time.monotonic() + wait,
                response=response,
                pk=response.data["id"],
                user=request.user,
            )
            request._long_poll = state
        first, until, deadline, pk = state.first, state.until, state.deadline, state.pk
        seen = state.seen
        left = deadline - time.monotonic()
        if reached(until, first, now) or left <= 0:
            return finished(response, until, state.user)
        if now != seen:  # a step on the way to what the call waits for: wait on from here
            seen = state.seen = now

        async def long_poll() -> bool:
            """True: woken, ask the view again; False: answer ``response`` as it now is."""
            known, wait = seen, left
            while (now := await watcher().next_state(pk, known, wait)) is not None:
                if not execution_moved_on(known, now):
                    return True  # only a read knows what changed
                known = now  # told by the message: no read needed
                if reached(until, first, known):
                    break
                wait = deadline - time.monotonic()
            if known != seen:
                retell(response, execution_status=known[3])
            if finish is not None and until == FINISHED and settled(known):
                # The result is read on a request thread (its connection kept), not on
                # one made for this call: a new thread and connection cost 1.5 ms more
                # than the agent's own second call.
                run = getattr(request, RUNS_ON_POOL, None) or sync_to_async(_call)
                await run(lambda: finished(response, until, state.user))
            return False

        return _held(request, response, long_poll, lambda: waiting_view(request, *args, **kwargs))

    return _like(waiting_view, view)


@dataclass
class _Waiting:
    """A waiting call's state between the passes of its view."""

    first: Fingerprint  # what the call first answered
    seen: Fingerprint  # what it last read or was told
    until: str
    deadline: float
    response: object  # the first pass's
    pk: int
    user: object  # as the view authenticated it


def reached(until: str, first: Fingerprint, now: Fingerprint) -> bool:
    """Whether a call that read ``first`` and waits ``until`` something can answer ``now``."""
    if until == FINISHED:
        return settled(now)
    if until == DECIDED:
        return now[0] != ProposalStatus.PENDING
    return now != first


def execution_moved_on(seen: Fingerprint, now: Fingerprint) -> bool:
    """Whether ``now`` differs from ``seen`` only in that the execution moved on.

    Then the answer is known without a read. A proposal with an execution
    was approved for good: nothing else its answer shows changes any more.
    An execution only moves forward (queued → running → an end), so a status
    past the one read is news even if the message that tells it is late: the
    answer is the proposal as it was when the message was sent, and at worst
    the execution has moved on again since, which the next call reads. Every
    wait of a proposal → result after the approval ends this way.
    """
    return seen[2] is not None and now[:3] == seen[:3] and _progress(now[3]) > _progress(seen[3])


_PROGRESS = {ExecutionStatus.QUEUED: 0, ExecutionStatus.RUNNING: 1}  # any other status: an end


def _progress(execution_status: str | None) -> int:
    return _PROGRESS.get(execution_status, 2)


def _call(function):
    return function()


def retell(response, **changed) -> None:
    """Change fields of a DRF response's data, rendered again if it was rendered."""
    response.data = {**response.data, **changed}
    if getattr(response, "is_rendered", False):
        response.content = response.rendered_content
        if response.has_header("Content-Length"):
            response.headers["Content-Length"] = str(len(response.content))


def _release() -> None:
    """Close this request thread's connection while its call waits (never inside a transaction)."""
    if not connection.in_atomic_block:
        connection.close()


def wait_for_rows(view, interest=None):
    """Wrap a list view: with ``?wait=N`` an empty page waits for a row that matches.

    Like ``long_poll``, without a thread or a connection under Airlock's ASGI
    handler. The call reads where the audit trail ends before its first read
    (``marker``); ``interest(request)`` says which changes could give it a row
    (an agent's own proposals, the statuses it asks for). It is asked again only
    for such a change: told by a broadcast, or read from the audit trail past
    what it has seen by the watcher's tick, one read for every waiting list of
    the process. It answers once its page has a row, or with the empty page when
    the time is up. The view validates ``wait``
    (``infrastructure.rest.listing.Filters``).
    """

    def waiting_view(request, *args, **kwargs):
        waits = request.method == "GET" and request.GET.get("wait") not in (None, "", "0")
        if waits and getattr(request, "_list_seen", None) is None:
            request._list_seen = marker()  # before the read: a change after it is past this
        response = view(request, *args, **kwargs)
        if request.method != "GET" or response.status_code != 200 or response.data["items"]:
            return response
        deadline = getattr(request, "_list_deadline", None)
        if deadline is None:
            wait = float(request.GET.get("wait") or 0)
            if not wait:
                return response
            deadline = request._list_deadline = time.monotonic() + wait
        left = deadline - time.monotonic()
        if left <= 0:
            return response
        wanted = interest(request) if interest is not None else Interest(None, None)
        seen = request._list_seen

        async def long_poll() -> bool:
            end = await watcher().rows_may_appear(left, wanted, seen)
            if end is None:
                return False
            request._list_seen = end
            return True

        return _held(request, response, long_poll, lambda: waiting_view(request, *args, **kwargs))

    return _like(waiting_view, view)


def _held(request, response, long_poll, ask_again):
    """Hold ``response`` until ``long_poll()`` says: under Airlock's ASGI handler, which awaits
    it without a thread; on a plain thread, here. Woken (True): ``ask_again()``."""
    if getattr(request, WAITS_OFF_THREAD, False):
        response.long_poll = long_poll
        return response
    _release()  # this thread waits: its connection need not
    if not async_to_sync(long_poll)():
        return response
    return ask_again()


def _like(waiting_view, view):
    """What drf-spectacular and DRF's tooling read off a view, on its waiting wrapper."""
    waiting_view.cls = view.cls
    waiting_view.initkwargs = view.initkwargs
    waiting_view.csrf_exempt = True
    return waiting_view
