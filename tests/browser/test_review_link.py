"""Approving from a review mail's link on a phone, against the real embedded deployment.

The deployment mails through a real SMTP server the test starts (aiosmtpd);
the phone is Chromium at 390×844 with touch, signed in to nothing.
"""

from __future__ import annotations

import os

import pytest

from tests.serving import start_server
from tests.standins import review_path, smtp_server
from tests.support import require

from .conftest import CHROMIUM, wait_for, watch_policy

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
ADDRESS = "reviewer@example.test"


@pytest.fixture(scope="module")
def inbox():
    with smtp_server() as (port, received):
        received.port = port
        yield received


@pytest.fixture(scope="module")
def server(tmp_path_factory, inbox):
    require(CHROMIUM.exists(), f"browser tests need Chromium at {CHROMIUM}")
    mail = {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(inbox.port),
    }
    running = start_server(tmp_path_factory.mktemp("airlock") / "data", extra_env=mail)
    yield running
    running.stop()


def shoot(page, name: str) -> None:
    """A full-page picture, when AIRLOCK_SCREENSHOTS names a folder (to look at the layout)."""
    folder = os.environ.get("AIRLOCK_SCREENSHOTS")
    if folder:
        page.screenshot(path=f"{folder}/{name}.png", full_page=True)


def test_a_reviewer_approves_from_the_mail_link_on_a_phone(
    server, login, browser, inbox, csp_violations
):
    desk = login("reviewer")
    desk.goto(server.base + "/profile/")
    desk.fill("#id_address", ADDRESS)
    desk.click("#save-preferences")
    desk.wait_for_selector("text=Your preferences are saved.")

    proposal = server.propose_script("import os\nprint(os.getcwd())", reason="from the phone")
    assert proposal["status"] == "pending", proposal
    message = wait_for(lambda: next(iter(inbox.to(ADDRESS)), None), timeout=60)
    assert f"proposal {proposal['id']} waits for review" in message["Subject"]
    path = review_path(message)

    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    watch_policy(phone, csp_violations)
    try:
        page = phone.new_page()
        opened = page.goto(server.base + path)
        assert opened.status == 200
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        approve = page.locator("#link-approve").bounding_box()
        assert approve["x"] >= 0 and approve["x"] + approve["width"] <= PHONE["width"]
        assert approve["height"] >= 44  # a thumb's worth
        _, before = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
        assert before["status"] == "pending"  # opening decided nothing

        page.fill("#link-comment", "fine from here")
        shoot(page, "review-link")
        page.tap("#link-approve")
        page.wait_for_selector("#link-done")
        shoot(page, "review-link-done")
        assert "You approved this proposal as reviewer" in page.inner_text("#link-done")

        _, after = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
        assert after["status"] == "approved"
        assert [(d["reviewer"], d["comment"]) for d in after["decisions"]] == [
            ("reviewer", "fine from here")
        ]
        again = page.goto(server.base + path)
        assert again.status == 410
        assert "works once" in page.inner_text("#link-refused")
    finally:
        phone.close()
