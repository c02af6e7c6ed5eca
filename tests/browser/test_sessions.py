"""A live view whose session ends elsewhere goes back to the sign-in page by itself."""

from __future__ import annotations

import pytest

from tests.serving import start_server
from tests.support import require

from .conftest import CHROMIUM

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require(CHROMIUM.exists(), f"browser tests need Chromium at {CHROMIUM}")
    running = start_server(
        tmp_path_factory.mktemp("airlock") / "data", extra_env={"WEBSOCKET_AUTH_CHECK_SECONDS": "1"}
    )
    yield running
    running.stop()


def test_signing_out_everywhere_takes_the_open_queue_back_to_the_sign_in_page(server, login):
    proposal = server.propose_script("import os\nprint(os.getcwd())", reason="watched")
    watching = login("reviewer2")
    watching.wait_for_selector(f"#proposal-row-{proposal['id']}")
    elsewhere = login("reviewer2")
    elsewhere.goto(server.base + "/profile/security/")
    elsewhere.click("#sign-out-everywhere")  # the confirm is accepted
    elsewhere.wait_for_url("**/login/**")
    watching.wait_for_url("**/login/**", timeout=15_000)  # closed with 4401, reloaded
    assert watching.is_visible("#id_login")
