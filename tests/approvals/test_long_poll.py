"""Long-poll: a waiting call answers on a change, and all waiters share one watcher.

Transactional: the watcher reads on its own thread and connection, so it sees
what was committed, as in production.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection

from approvals import services, waiting
from approvals.models import Proposal
from tests.approvals.test_proposals_api import RISKY, propose

pytestmark = pytest.mark.django_db(transaction=True)


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
    decider = later(0.5, lambda: services.decide(body["id"], reviewer, "approve", "ok"))

    started = time.monotonic()
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


def test_many_waiters_share_one_query_per_tick(agent, monkeypatch):
    ids = [
        services.submit(agent, {**RISKY, "idempotency_key": f"k{i}"}).proposal.pk for i in range(40)
    ]
    reads = []
    real_read = waiting._read
    monkeypatch.setattr(waiting, "_read", lambda pks: reads.append(len(pks)) or real_read(pks))
    seen = waiting.fingerprints(ids)

    async def main():
        watcher = waiting.watcher()
        tasks = [
            asyncio.create_task(watcher.wait_for_change(pk, seen[pk], timeout=10)) for pk in ids
        ]
        while watcher.watching < len(ids):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        reads_while_idle = len(reads)
        await asyncio.to_thread(
            lambda: Proposal.objects.filter(pk__in=ids[:30]).update(approvals_count=1)
        )
        woken = [await asyncio.wait_for(task, 5) for task in tasks[:30]]  # the changed ones answer
        await asyncio.sleep(0.3)
        still_waiting = [not task.done() for task in tasks[30:]]
        for task in tasks[30:]:
            task.cancel()
        return reads_while_idle, woken, still_waiting

    reads_while_idle, woken, still_waiting = asyncio.run(main())

    # 0.5 s at 50 ms a tick: about 10 reads for 40 waiters, each read covering all of them.
    assert 3 <= reads_while_idle <= 15, reads
    assert max(reads) == len(ids)
    assert woken == [True] * 30
    assert all(still_waiting)


def test_the_watcher_stops_when_nobody_waits(agent):
    pk = services.submit(agent, RISKY).proposal.pk
    seen = waiting.fingerprints([pk])[pk]

    async def main():
        watcher = waiting.watcher()
        changed = await watcher.wait_for_change(pk, seen, timeout=0.2)
        await asyncio.sleep(watcher.interval * 4)
        return changed, watcher.watching, watcher._task

    assert asyncio.run(main()) == (False, 0, None)


def test_a_waiter_arriving_as_the_watcher_winds_down_is_still_watched(agent):
    pk = services.submit(agent, RISKY).proposal.pk
    seen = waiting.fingerprints([pk])[pk]

    async def main():
        watcher = waiting.watcher()
        first = asyncio.create_task(watcher.wait_for_change(pk, seen, timeout=0.05))
        await first  # the watcher now winds down: it closes its connection
        await asyncio.sleep(watcher.interval)
        second = asyncio.create_task(watcher.wait_for_change(pk, seen, timeout=5))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(lambda: Proposal.objects.filter(pk=pk).update(approvals_count=1))
        return await second

    assert asyncio.run(main()) is True


@pytest.mark.parametrize("method", ["options", "post", "put", "delete"])
def test_other_methods_with_wait_answer_at_once(agent_api, method):
    _, body = propose(agent_api, RISKY)
    started = time.monotonic()
    response = getattr(agent_api, method)(f"/api/v1/proposals/{body['id']}?wait=3")
    assert time.monotonic() - started < 2
    assert response.status_code == (200 if method == "options" else 405)
