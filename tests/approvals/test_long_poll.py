"""Long-poll: a waiting call answers on a change, and all waiters share one watcher.

Transactional: the watcher reads on its own thread and connection, so it sees
what was committed, as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time

import pytest
from channels.layers import get_channel_layer
from django.db import connection

from approvals.agents import waiting
from approvals.core import services
from approvals.models import Proposal
from executions.broadcast import PROPOSALS_GROUP, broadcast
from tests.approvals.test_proposals_api import PRINT_HI, RISKY, propose
from tests.serving import free_port
from tests.support import have, port_open, require, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_linger(monkeypatch):
    """These tests follow the watcher's life call by call: it ends with its last waiter."""
    monkeypatch.setattr(waiting, "LINGER_SECONDS", 0)


def later(delay: float, action) -> threading.Thread:
    def run():
        time.sleep(delay)
        try:
            action()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_waiting_call_answers_as_soon_as_a_reviewer_approves(agent_api, reviewer):
    _, body = propose(agent_api, RISKY)
    assert body["status"] == "pending"
    started = time.monotonic()  # before the decider: its 0.5 s count from here at the earliest
    decider = later(0.5, lambda: services.decide(body["id"], reviewer, "approve", "ok"))
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=30")
    elapsed = time.monotonic() - started
    decider.join()

    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert response.json()["execution_status"] == "queued"
    assert 0.4 < elapsed < 5, elapsed


def test_a_waiting_call_without_a_change_answers_the_same_after_its_wait(agent_api):
    _, body = propose(agent_api, RISKY)
    started = time.monotonic()
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=1")
    assert 0.9 <= time.monotonic() - started < 5
    assert response.json() == body


def announce_change(ids) -> None:
    """What services do after commit: tell the proposals group (from a worker's thread)."""
    for pk in ids:
        broadcast(PROPOSALS_GROUP, {"type": "proposal.changed", "proposal_id": pk})


async def wind_down(watcher) -> None:
    """End the watcher and the channel layer's poller, as a server's loop would in time."""
    if watcher._task is not None:
        await asyncio.wait_for(watcher._task, 10)
    layer = get_channel_layer()
    poller = getattr(layer, "_poller", None)
    if poller is not None and poller.get_loop() is asyncio.get_running_loop():
        assert not layer.groups, layer.groups  # nobody listens any more
        poller.cancel()  # it would end by itself at its next safety read
        await asyncio.gather(poller, return_exceptions=True)


def test_many_waiters_share_one_read_per_change_and_idle_costs_nothing(agent, monkeypatch):
    wakes = []  # why the watcher woke: a broadcast, a kick, or its safety timeout
    real_next = waiting._Changes.next

    async def counted_next(self, kick, timeout):
        message = await real_next(self, kick, timeout)
        wakes.append("message" if message else "kick" if kick.is_set() else "timeout")
        return message

    monkeypatch.setattr(waiting._Changes, "next", counted_next)
    ids = [
        services.submit(agent, {**RISKY, "idempotency_key": f"k{i}"}).proposal.pk for i in range(40)
    ]
    reads = []
    real_read = waiting._read
    monkeypatch.setattr(waiting, "_read", lambda pks: reads.append(len(pks)) or real_read(pks))
    seen = waiting.fingerprints(ids)

    async def main():
        watcher = waiting.watcher()
        watcher.interval = 60  # no safety read in this test: only broadcasts wake it
        tasks = [
            asyncio.create_task(watcher.wait_for_change(pk, seen[pk], timeout=30)) for pk in ids
        ]
        while watcher.watching < len(ids):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the reads the registrations asked for are done
        settled, woken_by = len(reads), len(wakes)
        await asyncio.sleep(0.5)
        # Other tests' broadcasts may reach this group (a shared Redis): each
        # message may cost a read, but nothing else may.
        reads_while_idle = len(reads) - settled - wakes[woken_by:].count("message")

        def change():
            Proposal.objects.filter(pk__in=ids[:30]).update(approvals_count=1)
            announce_change(ids[:30])
            connection.close()

        await asyncio.to_thread(change)
        woken = [await asyncio.wait_for(task, 20) for task in tasks[:30]]  # the changed ones
        await asyncio.sleep(0.3)
        still_waiting = [not task.done() for task in tasks[30:]]
        for task in tasks[30:]:
            task.cancel()
        await asyncio.gather(*tasks[30:], return_exceptions=True)
        await wind_down(watcher)
        return reads_while_idle, woken, still_waiting

    reads_while_idle, woken, still_waiting = asyncio.run(main())

    # Half a second of nothing happening costs no read at all, and every read
    # covers every waiter.
    assert reads_while_idle <= 0, (reads, wakes)
    assert max(reads) == len(ids)
    assert woken == [True] * 30
    assert all(still_waiting)


def test_the_watcher_outlives_its_last_waiter_for_the_next_call_then_stops(agent, monkeypatch):
    monkeypatch.setattr(waiting, "LINGER_SECONDS", 1.0)
    pk = services.submit(agent, RISKY).proposal.pk
    seen = waiting.fingerprints([pk])[pk]
    subscriptions = []
    subscribe = waiting._Changes.subscribe

    async def counted(self):
        subscriptions.append(self)
        await subscribe(self)

    monkeypatch.setattr(waiting._Changes, "subscribe", counted)

    async def main():
        watcher = waiting.watcher()
        assert not await watcher.wait_for_change(pk, seen, timeout=0.05)
        lingering = watcher._task
        await asyncio.sleep(0.3)
        assert watcher._task is lingering and not lingering.done()  # nobody waits: still up
        assert not await watcher.wait_for_change(pk, seen, timeout=0.05)  # the next call
        assert watcher._task is lingering
        started = time.monotonic()
        await wind_down(watcher)  # returns once the linger is over
        return time.monotonic() - started, watcher._task

    waited, task = asyncio.run(main())
    assert 0.7 < waited < 5, waited
    assert task is None
    assert len(subscriptions) == 1  # two calls, one subscription


def test_the_watcher_stops_when_nobody_waits(agent):
    pk = services.submit(agent, RISKY).proposal.pk
    seen = waiting.fingerprints([pk])[pk]

    async def main():
        watcher = waiting.watcher()
        changed = await watcher.wait_for_change(pk, seen, timeout=0.2)
        await wind_down(watcher)
        return changed, watcher.watching, watcher._task

    assert asyncio.run(main()) == (False, 0, None)


def test_a_waiter_arriving_as_the_watcher_winds_down_is_still_watched(agent):
    pk = services.submit(agent, RISKY).proposal.pk
    seen = waiting.fingerprints([pk])[pk]

    async def main():
        watcher = waiting.watcher()
        watcher.interval = 60
        first = asyncio.create_task(watcher.wait_for_change(pk, seen, timeout=0.05))
        await first  # the watcher now winds down: it closes its connection
        second = asyncio.create_task(watcher.wait_for_change(pk, seen, timeout=20))
        await asyncio.sleep(0.2)

        def change():
            Proposal.objects.filter(pk=pk).update(approvals_count=1)
            announce_change([pk])
            connection.close()

        await asyncio.to_thread(change)
        changed = await second
        await wind_down(watcher)
        return changed

    assert asyncio.run(main()) is True


def test_a_change_made_just_before_a_waiter_registers_is_not_missed(agent):
    pk = services.submit(agent, RISKY).proposal.pk
    seen = waiting.fingerprints([pk])[pk]
    Proposal.objects.filter(pk=pk).update(approvals_count=1)  # and its broadcast came and went

    async def main():
        watcher = waiting.watcher()
        watcher.interval = 60
        changed = await watcher.wait_for_change(pk, seen, timeout=20)
        await wind_down(watcher)
        return changed

    assert asyncio.run(main()) is True


@pytest.mark.parametrize("method", ["options", "post", "put", "delete"])
def test_other_methods_with_wait_answer_at_once(agent_api, method):
    _, body = propose(agent_api, RISKY)
    started = time.monotonic()
    response = getattr(agent_api, method)(f"/api/v1/proposals/{body['id']}?wait=3")
    assert time.monotonic() - started < 2
    assert response.status_code == (200 if method == "options" else 405)


def test_waiters_keep_waking_after_the_request_that_started_the_watcher_ended(
    agent_and_token, reviewer, monkeypatch
):
    # The watcher and the channel layer's poller start inside the first waiting
    # request. Were they to keep that request's context, they would lose its
    # thread executor when it ends, and only the slow safety read (made an hour
    # here) could wake anyone after that.
    from channels.testing import HttpCommunicator

    from console.asgi import application

    agent, token = agent_and_token
    first, second = (services.submit(agent, RISKY).proposal.pk for _ in range(2))
    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]

    async def main():
        waiting.watcher().interval = 3600
        # The layer is the process's: the next tests get its own interval back.
        monkeypatch.setattr(get_channel_layer(), "poll_interval", 3600, raising=False)
        short = HttpCommunicator(
            application, "GET", f"/api/v1/proposals/{first}?wait=1", headers=headers
        )
        long = HttpCommunicator(
            application, "GET", f"/api/v1/proposals/{second}?wait=20", headers=headers
        )
        short_task = asyncio.create_task(short.get_response(timeout=10))
        await asyncio.sleep(0.3)
        long_task = asyncio.create_task(long.get_response(timeout=30))
        await short_task  # the request that started the watcher is over
        await asyncio.sleep(0.3)

        def reject():
            services.decide(second, reviewer, "reject", "no")
            connection.close()

        await asyncio.to_thread(reject)
        response = await long_task
        await wind_down(waiting.watcher())
        return response

    response = asyncio.run(main())
    assert response["status"] == 200
    assert b'"status":"rejected"' in response["body"].replace(b" ", b"")


def test_waiting_calls_hold_no_request_thread(agent_and_token, reviewer):
    """More calls wait than the handler has threads, and a plain read still answers at once."""
    from channels.testing import HttpCommunicator

    from infrastructure.handler import OneHopASGIHandler

    agent, token = agent_and_token
    app = OneHopASGIHandler(threads=2)
    pending = [services.submit(agent, RISKY).proposal.pk for _ in range(5)]
    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]

    def get(path: str) -> HttpCommunicator:
        return HttpCommunicator(app, "GET", path, headers=headers)

    async def main():
        waiters = [
            asyncio.create_task(get(f"/api/v1/proposals/{pk}?wait=30").get_response(timeout=40))
            for pk in pending
        ]
        await asyncio.sleep(0.5)
        started = time.monotonic()
        plain = await get(f"/api/v1/proposals/{pending[0]}").get_response(timeout=10)
        answered_in = time.monotonic() - started
        assert not any(w.done() for w in waiters), "a waiter answered without a change"

        def reject_all():
            for pk in pending:
                services.decide(pk, reviewer, "reject", "no")
            connection.close()

        await asyncio.to_thread(reject_all)
        answers = await asyncio.gather(*waiters)
        await wind_down(waiting.watcher())
        return plain, answered_in, answers

    plain, answered_in, answers = asyncio.run(main())
    assert plain["status"] == 200
    assert answered_in < 5, answered_in
    assert [a["status"] for a in answers] == [200] * len(pending)
    assert all(b'"status":"rejected"' in a["body"].replace(b" ", b"") for a in answers)


def test_a_message_with_the_new_state_wakes_its_waiter_without_a_read(agent, monkeypatch):
    pk = services.submit(agent, RISKY).proposal.pk
    seen = waiting.fingerprints([pk])[pk]
    reads = []
    real_read = waiting._read
    monkeypatch.setattr(waiting, "_read", lambda pks: reads.append(pks) or real_read(pks))
    state = {"status": "pending", "approvals": 1, "execution_id": None, "execution_status": None}

    async def main():
        watcher = waiting.watcher()
        watcher.interval = 60  # no safety read: only the message can wake it
        waiter = asyncio.create_task(watcher.wait_for_change(pk, seen, timeout=20))
        while not reads:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the registration's read is done
        read_before = len(reads)
        same = {
            "type": "proposal.changed",
            "proposal_id": pk,
            **dict(zip(state, seen, strict=True)),
        }
        await asyncio.to_thread(broadcast, PROPOSALS_GROUP, same)  # the state it saw
        await asyncio.sleep(0.5)
        woke_on_the_same = waiter.done()
        changed = {"type": "proposal.changed", "proposal_id": pk, **state}
        await asyncio.to_thread(broadcast, PROPOSALS_GROUP, changed)
        result = await asyncio.wait_for(waiter, 10)
        await wind_down(watcher)
        return woke_on_the_same, result, len(reads) - read_before

    woke_on_the_same, result, reads_after = asyncio.run(main())
    assert not woke_on_the_same
    assert result is True
    assert reads_after == 0


def test_a_late_message_of_an_old_state_does_not_end_a_wait(agent_and_token):
    """A wake is a hint: the call reads again and waits on when nothing changed."""
    from channels.testing import HttpCommunicator

    from infrastructure.handler import OneHopASGIHandler

    agent, token = agent_and_token
    pk = services.submit(agent, RISKY).proposal.pk
    app = OneHopASGIHandler(threads=2)
    stale = {
        "type": "proposal.changed",
        "proposal_id": pk,
        "status": "approved",  # as if an old message about another state came in late
        "approvals": 0,
        "execution_id": None,
        "execution_status": None,
    }

    async def main():
        headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]
        call = HttpCommunicator(app, "GET", f"/api/v1/proposals/{pk}?wait=2", headers=headers)
        started = time.monotonic()
        answer = asyncio.create_task(call.get_response(timeout=20))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(broadcast, PROPOSALS_GROUP, stale)
        response = await answer
        elapsed = time.monotonic() - started
        await wind_down(waiting.watcher())
        return response, elapsed

    response, elapsed = asyncio.run(main())
    assert response["status"] == 200
    assert b'"status":"pending"' in response["body"].replace(b" ", b"")
    assert elapsed >= 1.9, f"answered after {elapsed:.2f} s without a change"


@contextlib.contextmanager
def own_redis(settings, layer: str):
    """A redis-server of the test's own as the channel layer: yields (stop, start) it."""
    require(have("redis-server"), "this test starts its own redis-server")
    port = free_port()
    servers: list[subprocess.Popen] = []

    def start() -> None:
        servers.append(
            subprocess.Popen(
                ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
            )
        )
        wait_for(lambda: port_open("127.0.0.1", port), 10)

    def stop() -> None:
        servers[-1].terminate()
        servers[-1].wait()

    start()
    try:
        settings.CHANNEL_LAYERS = {
            "default": {"BACKEND": layer, "CONFIG": {"hosts": [f"redis://127.0.0.1:{port}/0"]}}
        }
        yield stop, start
    finally:
        for server in servers:
            server.kill()
            server.wait()


def test_the_watcher_does_not_spin_while_the_channel_layer_is_away(agent, settings, monkeypatch):
    """Redis going away under a subscribed watcher: a failed receive is retried once a second."""
    monkeypatch.setattr(waiting, "LINGER_SECONDS", 5)
    with own_redis(settings, "channels_redis.core.RedisChannelLayer") as (stop, _):
        pk = services.submit(agent, RISKY).proposal.pk
        seen = waiting.fingerprints([pk])[pk]
        receives: list[float] = []

        async def main():
            layer = get_channel_layer()
            receive = layer.receive

            async def counted(channel):
                receives.append(time.monotonic())
                return await receive(channel)

            layer.receive = counted
            watcher = waiting.watcher()
            call = asyncio.create_task(watcher.wait_for_change(pk, seen, timeout=3.5))
            await asyncio.sleep(0.5)  # subscribed and receiving
            assert receives, "the watcher is not listening"
            stop()
            away = time.monotonic()
            assert not await call  # nothing changed; the call waited out its time
            await asyncio.sleep(1.0)  # lingering, nobody waiting
            watcher._task.cancel()
            return away

        away = asyncio.run(main())
        while_away = [at for at in receives if at >= away]
        assert 1 <= len(while_away) <= 6, len(while_away)  # about one a second, not a spin


def test_a_watcher_hears_messages_again_once_redis_is_back(agent, settings, monkeypatch):
    """The deployment's layer (pub/sub) subscribes again when Redis restarts under it."""
    monkeypatch.setattr(waiting, "LINGER_SECONDS", 0)
    with own_redis(settings, settings.REDIS_CHANNEL_LAYER) as (stop, start):
        pk = services.submit(agent, RISKY).proposal.pk
        seen = waiting.fingerprints([pk])[pk]
        told = {  # a state only the message tells: the database still says pending
            "type": "proposal.changed",
            "proposal_id": pk,
            "status": "approved",
            "approvals": 1,
            "execution_id": None,
            "execution_status": None,
        }

        async def main():
            watcher = waiting.watcher()
            call = asyncio.create_task(watcher.next_state(pk, seen, timeout=20))
            await asyncio.sleep(0.5)  # subscribed
            await asyncio.to_thread(stop)
            await asyncio.to_thread(start)
            while not call.done():  # a message sent before it subscribed again is lost
                await asyncio.to_thread(broadcast, PROPOSALS_GROUP, told)
                await asyncio.sleep(0.25)
            now = await call
            await wind_down(watcher)
            return now

        assert asyncio.run(main()) == ("approved", 1, None, None)


def test_a_list_waits_for_the_first_new_proposal_that_matches(agent_api, agent):
    seen = services.submit(agent, RISKY).proposal.pk
    query = f"/api/v1/proposals?status=pending&since_id={seen}"
    later(0.3, lambda: services.submit(agent, PRINT_HI))  # approved at once: does not match
    later(0.8, lambda: services.submit(agent, RISKY))
    started = time.monotonic()
    response = agent_api.get(f"{query}&wait=20")
    took = time.monotonic() - started
    [item] = response.json()["items"]
    assert item["id"] > seen and item["status"] == "pending"
    assert 0.7 < took < 10, took
    started = time.monotonic()
    assert agent_api.get(f"{query}&wait=20").json()["items"]  # a page with rows: at once
    assert time.monotonic() - started < 2
    started = time.monotonic()
    response = agent_api.get(f"/api/v1/proposals?since_id={item['id']}&wait=1")
    assert response.json() == {"items": [], "next_cursor": None}
    assert 0.9 < time.monotonic() - started < 5


def test_waiting_lists_hold_no_request_thread(agent_and_token):
    """Three bots wait on the queue through a handler of one thread; a read still answers."""
    from channels.testing import HttpCommunicator

    from infrastructure.handler import OneHopASGIHandler

    agent, token = agent_and_token
    seen = services.submit(agent, RISKY).proposal.pk
    app = OneHopASGIHandler(threads=1)
    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]

    def get(path: str) -> HttpCommunicator:
        return HttpCommunicator(app, "GET", path, headers=headers)

    async def main():
        waiters = [
            asyncio.create_task(
                get(f"/api/v1/proposals?since_id={seen}&wait=30").get_response(timeout=40)
            )
            for _ in range(3)
        ]
        await asyncio.sleep(0.5)
        plain = await get(f"/api/v1/proposals/{seen}").get_response(timeout=10)
        assert not any(w.done() for w in waiters), "a list answered without a new proposal"

        def arrive():
            services.submit(agent, RISKY)
            connection.close()

        await asyncio.to_thread(arrive)
        answers = await asyncio.gather(*waiters)
        await wind_down(waiting.watcher())
        return plain, answers

    plain, answers = asyncio.run(main())
    assert plain["status"] == 200
    assert [a["status"] for a in answers] == [200] * 3
    assert all(b'"status":"pending"' in a["body"].replace(b" ", b"") for a in answers)
