"""GET /api/v1/audit and /api/v1/audit/verify: admins only, in order by pages, tampering named."""

from __future__ import annotations

import pytest

from approvals.core.tokens import create_user_token
from audit.models import AuditEvent
from audit.services import record
from tests.conftest import client_for


@pytest.fixture
def admin_api(admin_user):
    return client_for(create_user_token(admin_user))


def test_only_admins_read_the_trail(admin_api, reviewer_api, agent_api):
    assert admin_api.get("/api/v1/audit").status_code == 200
    for api in (reviewer_api, agent_api):
        for path in ("/api/v1/audit", "/api/v1/audit/verify"):
            response = api.get(path)
            assert response.status_code == 403
            assert response.json()["error"]["message"] == "only admins can read the audit trail"


def test_the_trail_comes_in_order_a_page_at_a_time_with_its_hashes(admin_api, db):
    for n in range(7):
        record("system", "test.event", None, n=n)
    total = AuditEvent.objects.count()
    seen, after = [], 0
    while after is not None:
        page = admin_api.get("/api/v1/audit", {"after": after, "limit": 3}).json()
        seen += page["events"]
        after = page["next_after"]
    assert [e["seq"] for e in seen] == list(range(1, total + 1))
    assert all(e["prev_hash"] and e["hash"] for e in seen)
    assert [e["data"]["n"] for e in seen if e["verb"] == "test.event"] == list(range(7))
    bad = admin_api.get("/api/v1/audit", {"limit": 0})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == "limit: must be between 1 and 1000, got 0"
    assert admin_api.get("/api/v1/audit", {"cursor": "x"}).status_code == 400


def test_verify_names_the_first_row_that_was_edited(admin_api, db):
    for n in range(4):
        record("system", "test.event", None, n=n)
    sound = admin_api.get("/api/v1/audit/verify").json()
    assert sound["ok"] is True and sound["checked"] == AuditEvent.objects.count()
    edited = AuditEvent.objects.filter(verb="test.event").order_by("seq")[2]
    AuditEvent.objects.filter(pk=edited.pk).update(data={"n": 99})
    report = admin_api.get("/api/v1/audit/verify").json()
    assert report == {
        "ok": False,
        "checked": edited.seq - 1,
        "first_bad_seq": edited.seq,
        "problem": f"row {edited.seq} was edited",
    }
