"""The embedded database queues write transactions on a lock the kernel hands over."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest
from django.db import connection, connections, transaction

from approvals.models import Agent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite backend's own lock"),
]


def lock_is_free() -> bool:
    fd = os.open(f"{connection.settings_dict['NAME']}.writer-lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops a lock this descriptor took
    return True


def flock_waiters() -> int:
    """How many are blocked on the writer lock (``/proc/locks`` lists them after ``->``)."""
    inode = os.stat(f"{connection.settings_dict['NAME']}.writer-lock").st_ino
    with open("/proc/locks") as f:
        return sum(
            1
            for line in f
            if "->" in line and "FLOCK" in line and line.split()[-3].endswith(f":{inode}")
        )


def test_a_write_transaction_holds_the_lock_until_commit_or_rollback():
    with transaction.atomic():
        Agent.objects.create(name="one", token_hash="1" * 64)
        assert not lock_is_free()
    assert lock_is_free()
    with pytest.raises(RuntimeError), transaction.atomic():
        Agent.objects.create(name="two", token_hash="2" * 64)
        raise RuntimeError("rolled back")
    assert lock_is_free()
    assert list(Agent.objects.values_list("name", flat=True)) == ["one"]


def test_a_second_writer_waits_for_the_first_and_then_goes_on():
    events = []
    first_in = threading.Event()
    release = threading.Event()

    def writer(name: str, hold: threading.Event | None) -> None:
        try:
            with transaction.atomic():
                events.append(f"{name} begins")
                if hold is not None:
                    first_in.set()
                    hold.wait(10)
                Agent.objects.create(name=name, token_hash=name[0] * 64)
                events.append(f"{name} commits")  # the last step inside the transaction
        finally:
            connections.close_all()

    first = threading.Thread(target=writer, args=("alpha", release))
    first.start()
    assert first_in.wait(10)
    second = threading.Thread(target=writer, args=("beta", None))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "the second writer began while the first held the lock"
    release.set()
    first.join(10)
    second.join(10)
    assert events == ["alpha begins", "alpha commits", "beta begins", "beta commits"]
    assert sorted(Agent.objects.values_list("name", flat=True)) == ["alpha", "beta"]


def test_a_write_outside_a_transaction_waits_for_the_writer_lock_too():
    """An autocommit statement queues behind a write transaction instead of backing off."""
    started = threading.Event()
    done = []

    def touch() -> None:
        try:
            started.set()
            Agent.objects.filter(name="held").update(token_hint="touched")  # autocommit
            done.append(True)
        finally:
            connections.close_all()

    with transaction.atomic():
        Agent.objects.create(name="held", token_hash="h" * 64)
        toucher = threading.Thread(target=touch)
        toucher.start()
        assert started.wait(10)
        toucher.join(0.5)
        assert toucher.is_alive() and not done, "the autocommit write did not wait"
        assert flock_waiters() == 1, "it waits in SQLite's busy handler, not on the lock"
    toucher.join(10)
    assert done == [True]
    assert Agent.objects.get(name="held").token_hint == "touched"
    assert lock_is_free()
