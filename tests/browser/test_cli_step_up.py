"""``airlock approve`` of a high-risk proposal: the terminal waits while the person proves a
second factor in the browser, then reports the decision they made there."""

from __future__ import annotations

import pyotp
import pytest

from tests.cli.test_cli import HIGH, Terminal
from tests.serving import user_token

from .steps import enrol_totp, step_up_with_totp

pytestmark = pytest.mark.browser


def test_the_terminal_waits_for_the_step_up_in_the_browser_and_reports_it(server, login, tmp_path):
    proposal = server.propose_script(HIGH, reason="cli step-up")
    assert proposal["risk"]["score"] >= 7 and proposal["status"] == "pending", proposal
    shell = Terminal(tmp_path / "home")
    token = user_token(server.log.parent, "reviewer")  # serve.log lies in the data dir
    assert shell("login", server.base, "--token", token).returncode == 0
    running = shell.start("approve", str(proposal["id"]), "-m", "checked the target dir")
    try:
        lines = []
        while not (lines and lines[-1].startswith("Waiting up to")):
            line = running.stderr.readline()
            assert line, f"airlock ended early: {''.join(lines)}"
            lines.append(line)
        url = next(line for line in lines if line.startswith("Finish in the browser: "))
        url = url.removeprefix("Finish in the browser: ").strip()
        assert url == (
            f"{server.base}/proposals/{proposal['id']}/approve/?comment=checked+the+target+dir"
        )
        page = login("reviewer")
        secret = enrol_totp(page, server.base)
        used = {pyotp.TOTP(secret).now()}
        page.goto(url)
        assert page.input_value("#decision-comment") == "checked the target dir"
        page.click("#approve-button")
        page.wait_for_url("**/step-up/**")  # risk 10: a factor proved just now
        step_up_with_totp(page, secret, used)
        page.wait_for_url(f"**/proposals/{proposal['id']}/approve/**")
        assert page.input_value("#decision-comment") == "checked the target dir"
        page.click("#approve-button")
        page.wait_for_selector("text=You have decided")
        out, err = running.communicate(timeout=90)
    finally:
        running.kill()
    assert running.returncode == 0, err
    assert out.strip() == f"Proposal #{proposal['id']}: pending; 1 more approval(s) needed"
    _, after = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
    [decision] = after["decisions"]
    assert decision["reviewer"] == "reviewer" and decision["comment"] == "checked the target dir"
