"""The notifications' outbox: written with the change, drained in batches, never lost or doubled."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.core import services
from approvals.core.outbox import notify
from approvals.models import PendingNotification, Proposal
from approvals.notify import outbox as notifications
from approvals.notify import tasks
from approvals.notify.base import Notifier
from tests.support import wait_for

MEDIUM = {
    "action": "script.execute",
    "parameters": {"language": "python", "code": "import os\nprint(os.listdir('.'))"},
}


class Told(Notifier):
    """A notifier that records what it is told, for every kind."""

    events: list = []

    def wants(self, kind: str) -> bool:
        return True

    def send(self, event) -> None:
        Told.events.append((event.kind, event.proposal_id))


@pytest.fixture
def told(settings):
    Told.events = []
    settings.NOTIFIERS = [f"{__name__}.Told", "approvals.notify.email.EmailNotifier"]
    return Told.events


@pytest.fixture
def drains(monkeypatch):
    """Drain requests are recorded, not sent: the test drains by hand, as a worker would."""
    asked = []
    monkeypatch.setattr(notifications, "request_drain", lambda: asked.append(1))
    return asked


def waiting(agent, count: int) -> list[Proposal]:
    return [
        Proposal.objects.create(agent=agent, action="script.execute", summary=str(i))
        for i in range(count)
    ]


def propose(api, body=MEDIUM) -> dict:
    response = api.post("/api/v1/proposals", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_the_event_is_written_with_the_proposal_and_told_once_by_a_drain(
    agent_api, reviewer_with_mail, told, drains, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        body = propose(agent_api)
    assert body["status"] == "pending"
    [notice] = PendingNotification.objects.all()
    assert (notice.kind, notice.proposal_id, notice.claim) == ("review_requested", body["id"], "")
    assert drains == [1]  # asked for after the commit
    assert told == [] and mail.outbox == []  # nobody told before a worker drains

    assert tasks.drain_notifications() == 1
    assert told == [("review_requested", body["id"])]
    [message] = mail.outbox
    assert message.to == ["rita@example.test"]
    assert not PendingNotification.objects.exists()
    assert tasks.drain_notifications() == 0  # told once
    assert len(told) == 1 and len(mail.outbox) == 1


def test_a_change_that_rolls_back_leaves_no_event(agent, told, drains):
    [proposal] = waiting(agent, 1)
    with pytest.raises(RuntimeError), transaction.atomic():
        notify("review_requested", proposal)
        assert PendingNotification.objects.count() == 1
        raise RuntimeError("the change fails after the event was written")
    assert not PendingNotification.objects.exists()
    assert drains == []
    assert notifications.drain() == 0 and told == []


def test_events_are_told_oldest_first_in_batches(agent, told, drains):
    proposals = waiting(agent, 7)
    for proposal in proposals:
        notify("review_requested", proposal)
    notify("decided", proposals[0])
    assert notifications.drain(limit=3) == 8
    assert told == [("review_requested", p.pk) for p in proposals] + [("decided", proposals[0].pk)]


def test_a_batch_claimed_by_a_live_drain_is_not_taken_again_until_its_claim_is_stale(
    agent, told, drains
):
    [proposal] = waiting(agent, 1)
    notify("review_requested", proposal)
    _, [claimed], _ = notifications._claim(10)  # another worker holds it, mid-batch
    assert notifications.drain() == 0 and told == []

    # That worker died: after CLAIM_SECONDS the event is someone else's to tell.
    stale = timezone.now() - timedelta(seconds=notifications.CLAIM_SECONDS + 1)
    PendingNotification.objects.filter(pk=claimed.pk).update(claimed_at=stale)
    assert notifications.drain() == 1
    assert told == [("review_requested", proposal.pk)]


def test_a_drain_costs_the_same_queries_for_one_event_or_many(agent, told, drains):
    queries = []
    for count in (1, 5):
        for proposal in waiting(agent, count):
            notify("review_requested", proposal)
        with CaptureQueriesContext(connection) as captured:
            assert notifications.drain() == count
        queries.append([query["sql"] for query in captured.captured_queries])
    assert not PendingNotification.objects.exists()
    one, five = queries
    # The claim (read, update, read back), the proposals, the reviewers (none with an
    # address: no proposal read again for mail), one delete; no second claim to find
    # the outbox empty after a batch shorter than the limit.
    assert len(one) == len(five) == 6, one
    assert [sql.split()[0] for sql in five] == [
        "SELECT",
        "UPDATE",
        "SELECT",
        "SELECT",
        "SELECT",
        "DELETE",
    ]
    assert sum('FROM "approvals_proposal"' in sql for sql in five) == 1


@pytest.mark.django_db(transaction=True)
def test_drains_at_once_tell_each_event_exactly_once(agent, told, drains):
    """Worker threads draining together, on real connections."""
    proposals = waiting(agent, 60)
    for proposal in proposals:
        notify("review_requested", proposal)
    counts: list[int] = []
    lock = threading.Lock()

    def drain():
        from django.db import connections

        try:
            told_here = notifications.drain(limit=5)
            with lock:
                counts.append(told_here)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counts) == 60
    assert sorted(pk for _, pk in told) == sorted(p.pk for p in proposals)


def test_one_notifier_failing_does_not_stop_the_others(agent, told, drains, settings):
    settings.NOTIFIERS = [f"{__name__}.Broken", f"{__name__}.Told"]
    [proposal] = waiting(agent, 1)
    notify("review_requested", proposal)
    assert notifications.drain() == 1
    assert told == [("review_requested", proposal.pk)]
    assert not PendingNotification.objects.exists()  # told as far as it could be: not retried


class Broken(Notifier):
    def send(self, event) -> None:
        raise RuntimeError("a notifier with a bug")


def test_a_lost_wake_up_is_made_good_by_the_periodic_drain(agent_api, told, drains):
    """A process that died between its commit and its drain request: beat's drain tells."""
    body = propose(agent_api)  # no on-commit callbacks run: the request never went out
    assert drains == []
    assert PendingNotification.objects.filter(proposal_id=body["id"]).exists()
    from console.celery import app

    registered = app.tasks  # finalizes the app, which sets the schedule
    schedule = app.conf.beat_schedule["drain-notifications"]
    assert schedule["task"] == tasks.drain_notifications.name
    assert schedule["schedule"] <= 30
    assert registered[schedule["task"]]() == 1
    assert told == [("review_requested", body["id"])]


def test_a_message_of_the_earlier_kind_is_still_told(agent, told):
    """One message per event, as sent before the outbox: still in a broker after an upgrade."""
    [proposal] = waiting(agent, 1)
    tasks.send_notifications("decided", proposal.pk)
    assert told == [("decided", proposal.pk)]


class TestWaker:
    """A process's drain requests: one message per burst, none lost."""

    @pytest.fixture
    def sent(self, monkeypatch):
        sent: list[float] = []
        monkeypatch.setattr(
            tasks.drain_notifications,
            "apply_async",
            lambda *args, **kwargs: sent.append(time.monotonic()),
        )
        return sent

    def test_a_ring_when_idle_sends_at_once_and_later_rings_share_the_next(self, sent, monkeypatch):
        monkeypatch.setattr(notifications, "WAKE_INTERVAL_SECONDS", 2.0)
        waker = notifications._Waker()
        started = time.monotonic()
        waker.ring()
        wait_for(lambda: len(sent) == 1, 5)
        assert sent[0] - started < 1.0  # not held for the interval
        for _ in range(20):
            waker.ring()  # within the interval after a message: they wait for the next
        time.sleep(0.5)
        assert len(sent) == 1
        wait_for(lambda: len(sent) == 2, 5)
        assert sent[1] - sent[0] >= 2.0
        time.sleep(2.5)
        assert len(sent) == 2  # twenty rings, one message

    def test_a_burst_costs_a_message_per_interval_and_its_last_ring_is_answered(
        self, sent, monkeypatch
    ):
        monkeypatch.setattr(notifications, "WAKE_INTERVAL_SECONDS", 0.05)
        waker = notifications._Waker()
        rings = 0
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            last_ring = time.monotonic()  # before the ring: what answers it is sent after
            waker.ring()
            rings += 1
            time.sleep(0.001)
        wait_for(lambda: sent and sent[-1] > last_ring, 5)  # a message after the last ring
        # About one message per interval (ten in the burst), not one per ring.
        assert rings > 40
        assert 2 <= len(sent) <= 13 and len(sent) < rings / 4

    def test_a_process_that_exits_sends_what_it_was_asked_for(self, sent):
        waker = notifications._Waker()
        waker._wanted.set()  # rung, and the thread has not sent yet
        waker._flush()
        assert len(sent) == 1 and not waker._wanted.is_set()

    def test_a_broker_away_is_logged_once_until_it_answers_again(self, monkeypatch, caplog):
        answers = iter([OSError("broker away")] * 3 + [None, OSError("away again")])
        here = threading.get_ident()

        def delay(*args, **kwargs):
            if threading.get_ident() != here:
                return  # the process's own waker, rung by an earlier test: not this one's
            answer = next(answers)
            if answer is not None:
                raise answer

        monkeypatch.setattr(tasks.drain_notifications, "apply_async", delay)
        waker = notifications._Waker.__new__(notifications._Waker)  # no thread: sends by hand
        waker._failing = False
        with caplog.at_level(logging.WARNING, logger=notifications.__name__):
            for _ in range(5):
                waker._send()
        said = [
            (r.levelname, r.getMessage().split(" (")[0]) for r in caplog.records if r.thread == here
        ]
        assert said == [
            ("ERROR", "could not ask for a notification drain"),
            ("WARNING", "notification drains are asked for again"),
            ("ERROR", "could not ask for a notification drain"),
        ]


def test_expiry_warnings_go_to_the_proposals_in_the_last_fifth_of_their_time(agent, drains):
    start = timezone.now().replace(microsecond=0)
    kinds = {}

    def pending(name: str, minutes: int = 100, status: str = "pending", **fields) -> None:
        proposal = Proposal.objects.create(
            agent=agent,
            action="script.execute",
            status=status,
            created_at=start,
            expires_at=start + timedelta(minutes=minutes),
            **fields,
        )
        kinds[proposal.pk] = name

    pending("due from 40 of 50 minutes", minutes=50)
    pending("expired at 60 before its warning was due at 48", minutes=60)
    pending("due from 80 of 100 minutes")
    pending("not due until 160 of 200 minutes", minutes=200)
    pending("warned already", expiry_warned_at=start)
    pending("decided", status="approved")

    def warned_at(minutes: int, seconds: int = 0) -> list[str]:
        before = set(PendingNotification.objects.values_list("id", flat=True))
        count = services.warn_expiring(now=start + timedelta(minutes=minutes, seconds=seconds))
        new = PendingNotification.objects.exclude(id__in=before).filter(kind="expiry_warning")
        names = [kinds[pk] for pk in new.values_list("proposal_id", flat=True)]
        assert count == len(names)
        return names

    assert warned_at(39, 59) == []
    assert warned_at(40) == ["due from 40 of 50 minutes"]
    assert warned_at(47) == []
    assert warned_at(79, 59) == []
    assert warned_at(80) == ["due from 80 of 100 minutes"]
    assert warned_at(80) == []  # once


def test_expiry_warnings_read_only_the_proposals_that_are_due(agent, drains, monkeypatch):
    start = timezone.now()
    for minutes in [100] * 40 + [10]:  # a long queue, one of it near its end
        Proposal.objects.create(
            agent=agent,
            action="script.execute",
            status="pending",
            created_at=start,
            expires_at=start + timedelta(minutes=minutes),
        )
    read = []
    from_db = Proposal.from_db
    monkeypatch.setattr(
        Proposal, "from_db", classmethod(lambda cls, *row: read.append(row) or from_db(*row))
    )
    assert services.warn_expiring(now=start + timedelta(minutes=9)) == 1
    assert len(read) == 1  # not the forty that are not due
