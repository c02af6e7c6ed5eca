"""The sandbox status cache: one probe at a time, and no caller waits for a refresh."""

from __future__ import annotations

import threading
import time

import pytest

from executions.sandboxes import status
from executions.sandboxes.base import Availability


class SlowProbes:
    """``probe_all`` as a backend that takes a while to answer, counting its probes."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.calls = 0
        self.reason = "first"
        self.started = threading.Event()

    def __call__(self) -> dict[str, Availability]:
        self.calls += 1
        self.started.set()
        time.sleep(self.seconds)
        return {"local": Availability(True, self.reason, isolation="weak")}


@pytest.fixture
def probes(monkeypatch, settings):
    settings.SANDBOX_BACKEND = "local"
    slow = SlowProbes(0.3)
    monkeypatch.setattr(status, "probe_all", slow)
    monkeypatch.setattr(status, "resolve_backend_name", lambda: "local")
    monkeypatch.setattr(status, "_last", None)
    yield slow
    with status._probing:  # a background probe still running ends before the next test
        pass


def test_callers_that_arrive_together_share_one_probe(probes):
    answers = []
    callers = [
        threading.Thread(target=lambda: answers.append(status.sandbox_status())) for _ in range(6)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert probes.calls == 1
    assert [answer["reason"] for answer in answers] == ["first"] * 6


def test_a_stale_answer_is_given_at_once_while_one_thread_probes_again(probes, monkeypatch):
    assert status.sandbox_status()["reason"] == "first"
    at, answer = status._last
    monkeypatch.setattr(status, "_last", (at - status.CACHE_SECONDS, answer))
    probes.reason, probes.started = "second", threading.Event()
    started = time.monotonic()
    answers = [status.sandbox_status()["reason"] for _ in range(5)]
    assert time.monotonic() - started < probes.seconds  # nobody waited for the probe
    assert answers == ["first"] * 5
    assert probes.started.wait(5) and probes.calls == 2  # one refresh, not five
    with status._probing:  # the refresh has finished
        pass
    assert status.sandbox_status()["reason"] == "second" and probes.calls == 2


def test_a_refresh_waits_for_a_probe_of_its_own(probes):
    status.sandbox_status()
    probes.reason = "asked for"
    assert status.sandbox_status(refresh=True)["reason"] == "asked for"
    assert probes.calls == 2


def test_a_failed_refresh_keeps_the_last_answer(probes, monkeypatch):
    status.sandbox_status()
    at, answer = status._last
    monkeypatch.setattr(status, "_last", (at - status.CACHE_SECONDS, answer))

    def broken():
        raise OSError("docker socket went away")

    monkeypatch.setattr(status, "probe_all", broken)
    assert status.sandbox_status()["reason"] == "first"
    with status._probing:  # the failed refresh has finished and let go of the lock
        assert status._last[1] is answer
    monkeypatch.setattr(status, "probe_all", probes)
    probes.reason = "recovered"
    assert status.sandbox_status()["reason"] == "first"  # still stale: a new refresh starts
    with status._probing:
        pass
    assert status.sandbox_status()["reason"] == "recovered"
