"""Every audit record reaches every sink in order, at least once, whatever the sink went through.

Against real receivers: rsyslog from Debian (TCP and TLS) and an HTTP
receiver process (Splunk HEC and JSON lines), stopped and started again.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import timedelta

import pytest
from celery import current_app
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from audit.checkpoints import new_key, sign_head, signing_key
from audit.models import SinkPosition
from audit.services import record
from audit.shipping import ship
from audit.shipping.base import Sink
from tests.audit.receivers import RSYSLOGD, HttpReceiver, Rsyslog, wait_for
from tests.audit.tls import make_certificates
from tests.support import require

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def rsyslog_available():
    require(shutil.which(RSYSLOGD) is not None, "rsyslogd is not installed (Debian: rsyslog)")


def add_records(count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        with transaction.atomic():
            record("system", "test.event", None, n=n)


def seqs(entries: list[dict], kind: str = "audit") -> list[int]:
    return [e["seq"] for e in entries if e["type"] == kind]


def position(sink) -> SinkPosition:
    return SinkPosition.objects.get(name=sink.name)


def due_now(sink) -> None:
    """Let the sink's next try come at once (instead of waiting out its back-off)."""
    SinkPosition.objects.filter(name=sink.name).update(next_attempt_at=timezone.now())


def test_rsyslog_receives_each_record_as_rfc5424_in_order(rsyslog_available, tmp_path, settings):
    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "signing.pem")
    settings.AUDIT_CHECKPOINT_FILE = str(tmp_path / "checkpoints.jsonl")
    new_key(tmp_path / "signing.pem")
    add_records(30)
    checkpoint = sign_head(signing_key())
    add_records(2, start=30)
    with Rsyslog(tmp_path / "rsyslog") as receiver:
        sink = ship.sink_for(f"syslog://127.0.0.1:{receiver.port}")
        assert ship.ship(sink) == 33
        messages = wait_for(receiver.messages, 33)
    assert re.match(
        r"^<110>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00 \S+ airlock - audit "
        r'\[airlock@32473 seq="1" type="audit"\] \ufeff\{',
        messages[0],
    )
    entries = receiver.entries()
    assert seqs(entries) == list(range(1, 33))
    # The checkpoint comes right after the record it names, with its signature.
    assert entries[30] == {**entries[30], "type": "checkpoint", "seq": 30, "hash": checkpoint.hash}
    assert entries[29]["hash"] == checkpoint.hash
    assert all(
        b["prev_hash"] == a["hash"] for a, b in zip(entries[:29], entries[1:30], strict=True)
    )
    assert (position(sink).seq, position(sink).checkpoint) == (32, checkpoint.pk)


def test_a_sink_down_for_a_while_receives_everything_in_order_when_back(
    rsyslog_available, tmp_path, monkeypatch
):
    monkeypatch.setattr(ship, "BATCH", 40)  # several batches after the outage
    receiver = Rsyslog(tmp_path / "rsyslog")
    receiver.start()
    sink = ship.sink_for(f"syslog://127.0.0.1:{receiver.port}")
    add_records(5)
    assert ship.ship(sink) == 5
    wait_for(receiver.messages, 5)

    receiver.stop()
    add_records(150, start=5)
    assert ship.ship(sink) == 0
    down = position(sink)
    assert (down.seq, down.failures) == (5, 1)
    assert "ConnectionRefusedError" in down.last_error
    assert down.next_attempt_at > timezone.now()
    [lag] = ship.lags_of([sink])
    assert (lag.behind, lag.head) == (150, 155) and lag.seconds >= 0
    # Until its back-off is over, a failing sink is not tried again.
    assert ship.ship(sink) == 0 and position(sink).failures == 1

    receiver.start()
    due_now(sink)
    assert ship.ship(sink) == 150
    receiver.stop()
    assert seqs(wait_for(receiver.entries, 155)) == list(range(1, 156))
    back = position(sink)
    assert (back.seq, back.failures, back.last_error, back.next_attempt_at) == (155, 0, "", None)
    assert ship.lags_of([sink])[0].behind == 0


def test_syslog_over_tls_checks_the_receivers_certificate(rsyslog_available, tmp_path):
    certificates = make_certificates(tmp_path / "tls")
    add_records(3)
    with Rsyslog(tmp_path / "rsyslog", tls=certificates) as receiver:
        untrusted = ship.sink_for(f"syslog+tls://127.0.0.1:{receiver.port}")
        assert ship.ship(untrusted) == 0
        assert "CERTIFICATE_VERIFY_FAILED" in position(untrusted).last_error
        SinkPosition.objects.all().delete()
        trusted = ship.sink_for(f"syslog+tls://127.0.0.1:{receiver.port}?ca={certificates['ca']}")
        assert ship.ship(trusted) == 3
        assert seqs(wait_for(receiver.entries, 3)) == [1, 2, 3]


def test_splunk_hec_gets_events_with_its_token_and_a_refusal_is_sent_again(tmp_path):
    add_records(4)
    with HttpReceiver(tmp_path / "hec", refuse=1) as receiver:
        sink = ship.sink_for(f"splunk+http://s3cret@127.0.0.1:{receiver.port}")
        assert ship.ship(sink) == 0
        assert "503" in position(sink).last_error and "Server busy" in position(sink).last_error
        due_now(sink)
        assert ship.ship(sink) == 4
    refused, accepted = receiver.posts()
    assert refused["refused"] and not accepted["refused"]
    assert accepted["path"] == "/services/collector/event"
    assert accepted["authorization"] == "Splunk s3cret"
    events = [json.loads(line) for line in accepted["body"].splitlines()]
    assert {e["sourcetype"] for e in events} == {"airlock:audit"}
    assert [e["event"]["seq"] for e in events] == [1, 2, 3, 4]
    assert all(isinstance(e["time"], float) and e["source"] == "airlock" for e in events)
    assert sink.name == f"splunk+http://127.0.0.1:{receiver.port}"  # no token in what is shown


def test_json_lines_carry_a_bearer_token_and_only_what_the_sink_lacks(tmp_path):
    add_records(3)
    with HttpReceiver(tmp_path / "jsonl") as receiver:
        sink = ship.sink_for(f"http://tok@127.0.0.1:{receiver.port}/audit")
        assert ship.ship(sink) == 3
        add_records(2, start=3)
        assert ship.ship(sink) == 2
        assert ship.ship(sink) == 0
    first, second = receiver.posts()
    assert (first["path"], first["authorization"]) == ("/audit", "Bearer tok")
    assert first["content_type"] == "application/x-ndjson"
    assert seqs(receiver.entries()) == [1, 2, 3, 4, 5]


def test_stdout_writes_one_json_line_per_record(capsys):
    add_records(2)
    sink = ship.sink_for("stdout:")
    assert ship.ship(sink) == 2
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["type"], e["seq"], e["verb"]) for e in lines] == [
        ("audit", 1, "test.event"),
        ("audit", 2, "test.event"),
    ]


def test_a_sink_held_by_another_worker_is_left_alone(tmp_path):
    add_records(3)
    with HttpReceiver(tmp_path / "jsonl") as receiver:
        sink = ship.sink_for(f"http://127.0.0.1:{receiver.port}/")
        SinkPosition.objects.create(
            name=sink.name, claim="other", claimed_until=timezone.now() + timedelta(minutes=1)
        )
        assert ship.ship(sink) == 0
        # A claim whose worker died is taken over once it runs out.
        SinkPosition.objects.update(claimed_until=timezone.now() - timedelta(seconds=1))
        assert ship.ship(sink) == 3
    assert len(receiver.posts()) == 1


def test_the_beat_task_ships_every_configured_sink(tmp_path, settings):
    add_records(2)
    with HttpReceiver(tmp_path / "a") as first, HttpReceiver(tmp_path / "b") as second:
        settings.AUDIT_SINKS = [
            f"http://127.0.0.1:{first.port}/",
            f"splunk+http://t@127.0.0.1:{second.port}",
        ]
        current_app.tasks["audit.tasks.ship"].apply()
    assert seqs(first.entries()) == seqs(second.entries()) == [1, 2]


@pytest.mark.parametrize(
    "url, says",
    [
        ("ftp://host/x", "is not a sink"),
        ("syslog://127.0.0.1", "names no port"),
        ("https:///path", "names no host"),
        ("syslog://h:99999", "bad port"),
    ],
)
def test_a_sink_that_cannot_work_is_named_with_the_reason(url, says):
    with pytest.raises(ImproperlyConfigured, match=says):
        ship.sink_for(url)


class _TakenOverOnSecondBatch(Sink):
    """A sink that keeps what it is sent; while it takes the second batch another worker
    takes the sink over (as one would once this pass outlived its claim)."""

    def __init__(self):
        super().__init__("stdout:")
        self.batches: list[list[dict]] = []
        self.claimed_until = []  # as each batch is sent

    def send(self, entries: list[dict]) -> None:
        self.batches.append(entries)
        self.claimed_until.append(SinkPosition.objects.get(name=self.name).claimed_until)
        if len(self.batches) == 2:
            SinkPosition.objects.filter(name=self.name).update(claim="other")


def test_a_long_catch_up_renews_its_claim_and_stops_when_taken_over(monkeypatch):
    monkeypatch.setattr(ship, "BATCH", 10)
    add_records(35)
    sink = _TakenOverOnSecondBatch()
    ship.ship(sink)
    assert [len(batch) for batch in sink.batches] == [10, 10]  # stopped: the other goes on
    first, second = sink.claimed_until
    assert second > first  # renewed when the first batch was acknowledged
    held = position(sink)
    assert (held.seq, held.claim) == (10, "other")  # the taken batch is the other's to resend
