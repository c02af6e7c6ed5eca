"""Admins see how far each audit sink has been sent the trail; Prometheus reads the same lag."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit.models import AuditEvent
from audit.services import record
from audit.shipping import ship
from tests.audit.receivers import HttpReceiver

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_deliveries_page_shows_each_sinks_position_and_lag(admin_client_, settings, tmp_path):
    for n in range(5):
        with transaction.atomic():
            record("system", "test.event", None, n=n)
    with HttpReceiver(tmp_path / "up") as receiver:
        up = f"http://127.0.0.1:{receiver.port}/audit"
        down = "syslog://127.0.0.1:9"  # nothing listens on the discard port
        settings.AUDIT_SINKS = [up, down]
        ship.ship_all()
    page = admin_client_.get("/manage/deliveries/").content.decode()
    section = page.split('id="audit-sinks"')[1].split("</section>")[0]
    up_row, down_row = section.split('class="audit-sink')[1:]
    head = AuditEvent.objects.count()  # the five, and the admin's sign-in
    assert up in up_row and f"#{head} <" in up_row and "up to date" in up_row
    assert "syslog://127.0.0.1:9" in down_row and f"{head} records, the oldest" in down_row
    assert "ConnectionRefusedError" in down_row and "1 try" in down_row

    metrics = admin_client_.get("/metrics").content.decode()
    assert f'airlock_audit_sink_behind_records{{sink="{up}"}} 0.0' in metrics
    assert f'airlock_audit_sink_behind_records{{sink="syslog://127.0.0.1:9"}} {head}.0' in metrics


def test_a_sink_setting_that_cannot_work_is_shown_not_a_500(admin_client_, settings):
    settings.AUDIT_SINKS = ["ftp://somewhere"]
    response = admin_client_.get("/manage/deliveries/")
    assert response.status_code == 200
    assert "ftp://somewhere" in response.content.decode()
    assert "is not a sink" in response.content.decode()


def test_without_sinks_the_page_says_the_trail_goes_nowhere(admin_client_, settings):
    settings.AUDIT_SINKS = []
    assert (
        "The audit trail is sent nowhere"
        in admin_client_.get("/manage/deliveries/").content.decode()
    )
