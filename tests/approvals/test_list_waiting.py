"""Waiting list calls (``GET /api/v1/proposals?wait=N``): woken only by what could give
them a row, and read for all at once at a tick (``approvals.agents.changes``).

Transactional: the watcher reads on its own thread and connection, so it sees
what was committed, as in production.
"""

from __future__ import annotations

import asyncio

import pytest
from django.db import connection

from approvals.agents import waiting
from approvals.agents.changes import Interest, marker
from approvals.core import services
from tests.approvals.test_long_poll import no_linger, wind_down  # noqa: F401
from tests.approvals.test_proposals_api import RISKY

pytestmark = pytest.mark.django_db(transaction=True)


def test_idle_list_waiters_cost_one_read_a_tick_and_a_change_wakes_only_those_it_concerns(
    make_agent, monkeypatch
):
    """A thousand agents wait on their own lists: a tick reads the audit trail once for
    them all, and a new proposal of one agent wakes that agent's calls, not the others'.
    Told by nothing but the ticks here (no channel layer), as when a broadcast is lost."""
    monkeypatch.setattr(waiting, "get_channel_layer", lambda: None)
    reads = []
    real = waiting.changes_since
    monkeypatch.setattr(waiting, "changes_since", lambda low: reads.append(low) or real(low))
    mine, _ = make_agent("mine", ["*"])
    others, _ = make_agent("others", ["*"])
    pending = frozenset({"pending"})

    async def main():
        watcher = waiting.ProposalWatcher(interval=0.1)
        seen = await asyncio.to_thread(marker)
        theirs = [
            asyncio.create_task(watcher.rows_may_appear(30, Interest(others.pk, pending), seen))
            for _ in range(1000)
        ]
        wanted = asyncio.create_task(watcher.rows_may_appear(30, Interest(mine.pk, pending), seen))
        approved_only = asyncio.create_task(
            watcher.rows_may_appear(30, Interest(mine.pk, frozenset({"approved"})), seen)
        )
        await asyncio.sleep(1.0)
        idle_reads = len(reads)

        def arrive():
            services.submit(mine, RISKY)
            connection.close()

        await asyncio.to_thread(arrive)
        end = await asyncio.wait_for(wanted, 5)
        await asyncio.sleep(0.5)
        untouched = not any(task.done() for task in theirs) and not approved_only.done()
        for task in [*theirs, approved_only]:
            task.cancel()
        await asyncio.gather(*theirs, approved_only, return_exceptions=True)
        await wind_down(watcher)
        return idle_reads, end, seen, untouched

    idle_reads, end, seen, untouched = asyncio.run(main())
    assert 5 <= idle_reads <= 15, idle_reads  # one a tick for all 1,002 (ten ticks a second)
    assert end > seen  # it woke at the change, and reads on from there
    assert untouched  # the other agent's calls, and a call for approved ones, sleep on
