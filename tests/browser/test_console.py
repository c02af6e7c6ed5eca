"""The reviewer console in a real browser, against the real embedded deployment."""

from __future__ import annotations

import pytest

from .conftest import wait_for

pytestmark = pytest.mark.browser

# `import os` holds it for a reviewer; the loop prints one line every 0.3 s.
LINES = 25


def streaming_code(lines: int = LINES, pause: float = 0.3) -> str:
    return (
        "import os, time\n"
        f"for i in range({lines}):\n"
        "    print(f'\\x1b[32mline {i}\\x1b[0m', flush=True)\n"
        f"    time.sleep({pause})\n"
    )


def expected_text(lines: int = LINES) -> str:
    return "".join(f"line {i}\n" for i in range(lines))


def terminal_text(page) -> str:
    return page.inner_text("#terminal")


def approve_in_browser(page, server, proposal: dict, login) -> dict:
    """Approve from the proposal page (a second reviewer too, if the quorum needs one)."""
    page.goto(f"{server.base}/proposals/{proposal['id']}/")
    page.click("#approve-button")
    # Approved, or (at a quorum) "You have decided; waiting for another reviewer."
    page.wait_for_selector("#proposal-state .status-approved, #decide-area p.muted")
    status, body = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
    if body["status"] == "pending":  # high risk: two distinct reviewers
        second = login("reviewer2")
        second.goto(f"{server.base}/proposals/{proposal['id']}/")
        second.click("#approve-button")
        second.wait_for_selector(".status-approved")
    page.wait_for_selector("#execution-link")
    return server.api("GET", f"/api/v1/proposals/{proposal['id']}")[1]


def test_a_reviewer_sees_a_proposal_arrive_approves_it_and_watches_the_output(server, login):
    page = login("reviewer")
    page.evaluate("window.__noReload = true")
    proposal = server.propose_script(streaming_code(), reason="watch the output arrive")
    assert proposal["status"] == "pending", proposal
    page.wait_for_selector(f"#proposal-row-{proposal['id']}")
    assert page.evaluate("window.__noReload") is True, "the queue reloaded"
    assert "watch" not in page.url

    page.click(f"#proposal-row-{proposal['id']} a")
    page.wait_for_url(f"**/proposals/{proposal['id']}/")
    assert page.is_visible(".code-block .kn")  # highlighted `import`
    approve_in_browser(page, server, proposal, login)
    page.click("#execution-link")
    page.wait_for_selector("#terminal")

    seen = set()

    def finished() -> bool:
        text = terminal_text(page)
        seen.add(text.count("\n"))
        return page.get_attribute("#terminal", "data-state") == "done"

    wait_for(finished, timeout=60, interval=0.1)
    assert terminal_text(page) == expected_text()
    partial = sorted(n for n in seen if 0 < n < LINES)
    assert len(partial) >= 5, f"output did not arrive line by line: {sorted(seen)}"
    page.wait_for_selector(".status-succeeded")
    assert page.inner_text("#exit-code") == "0"
    colour = page.eval_on_selector("#terminal span", "span => getComputedStyle(span).color")
    assert colour != page.eval_on_selector("#terminal", "t => getComputedStyle(t).color")


def test_another_reviewer_cancels_a_running_execution(server, login):
    proposal = server.propose_script(streaming_code(lines=200), reason="runs for a minute")
    first = login("reviewer")
    approved = approve_in_browser(first, server, proposal, login)
    execution_id = approved["execution_id"]

    other = login("reviewer2")
    other.goto(f"{server.base}/executions/{execution_id}/")
    wait_for(lambda: "line 3" in terminal_text(other))
    other.click("#cancel-button")
    other.wait_for_selector(".status-cancelled", timeout=30_000)
    wait_for(lambda: other.get_attribute("#terminal", "data-state") == "done")
    _, execution = server.api("GET", f"/api/v1/executions/{execution_id}")
    assert execution["status"] == "cancelled"
    assert "line 199" not in execution["stdout"]


def test_a_rejection_with_a_comment_reaches_the_agent(server, login):
    proposal = server.propose_script("import os\nprint(os.listdir('.'))", reason="look around")
    page = login("reviewer")
    page.goto(f"{server.base}/proposals/{proposal['id']}/")
    page.fill("#decision-comment", "not without a ticket")
    page.click("#reject-button")
    page.wait_for_selector("#proposal-state .status-rejected")
    assert "not without a ticket" in page.inner_text("#proposal-state")
    _, body = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
    assert body["status"] == "rejected"
    assert body["decisions"][-1]["comment"] == "not without a ticket"
    assert body["decisions"][-1]["reviewer"] == "reviewer"


def test_a_reload_mid_stream_shows_all_output_so_far_and_continues(server, login):
    proposal = server.propose_script(streaming_code(lines=30), reason="reload me")
    page = login("reviewer")
    approved = approve_in_browser(page, server, proposal, login)
    page.goto(f"{server.base}/executions/{approved['execution_id']}/")
    wait_for(lambda: "line 5\n" in terminal_text(page))
    page.reload()
    page.wait_for_selector("#terminal")
    wait_for(lambda: "line 5\n" in terminal_text(page))
    text = terminal_text(page)
    assert text == expected_text(30)[: len(text)], "output lost or repeated after the reload"
    assert page.get_attribute("#terminal", "data-state") != "done", "finished before the check"
    wait_for(lambda: page.get_attribute("#terminal", "data-state") == "done", timeout=60)
    assert terminal_text(page) == expected_text(30)


def test_the_keyboard_moves_through_the_queue_and_rejects_after_a_confirm(server, login):
    first = server.propose_script("import os\nprint(os.getcwd())", reason="one")
    second = server.propose_script("import os\nprint(os.getpid())", reason="two")
    page = login("reviewer")
    for proposal in (first, second):
        page.wait_for_selector(f"#proposal-row-{proposal['id']}")
    page.keyboard.press("?")
    assert page.is_visible("#help")
    page.keyboard.press("Escape")
    ids = page.eval_on_selector_all(
        "#queue-list tr[data-proposal]", "rows => rows.map(r => r.dataset.proposal)"
    )
    page.keyboard.press("j")
    page.keyboard.press("j")
    selected = page.get_attribute("tr.selected", "data-proposal")
    assert selected == ids[min(1, len(ids) - 1)]
    # Visible focus, once a live re-render of the queue (if one came) has settled.
    page.wait_for_function(
        "() => { const r = document.querySelector('tr.selected');"
        " return r && getComputedStyle(r).outlineStyle === 'solid'; }",
        timeout=15_000,  # a loaded machine settles the re-render late
    )
    page.keyboard.press("k")
    assert page.get_attribute("tr.selected", "data-proposal") == ids[0]
    target = ids[0]
    page.keyboard.press("r")
    assert page.is_visible("#confirm-decision")
    page.fill("#confirm-comment", "keyboard says no")
    with page.expect_navigation():
        page.click("#confirm-submit")
    assert page.url == server.base + "/"
    wait_for(lambda: not page.query_selector(f"#proposal-row-{target}"))
    _, body = server.api("GET", f"/api/v1/proposals/{target}")
    assert body["status"] == "rejected" and body["decisions"][-1]["comment"] == "keyboard says no"


def test_the_console_fits_a_phone(server, login):
    server.propose_script("import os\nprint(os.getuid())", reason="phone")
    page = login("reviewer", viewport={"width": 390, "height": 844})
    page.wait_for_selector("#queue-list tr[data-proposal]")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"{overflow}px of horizontal scrolling at phone width"


def test_scrolling_up_pauses_auto_scroll_and_a_dropped_connection_resumes(server, login):
    proposal = server.propose_script(streaming_code(lines=120, pause=0.1), reason="lots")
    page = login("reviewer", viewport={"width": 1280, "height": 500})
    approved = approve_in_browser(page, server, proposal, login)
    page.goto(f"{server.base}/executions/{approved['execution_id']}/")
    overflowing = "t => t.scrollHeight > t.clientHeight + 200"
    wait_for(lambda: page.eval_on_selector("#terminal", overflowing))
    page.eval_on_selector(
        "#terminal", "t => { t.scrollTop = 0; t.dispatchEvent(new Event('scroll')); }"
    )
    lines_then = terminal_text(page).count("\n")
    wait_for(lambda: terminal_text(page).count("\n") > lines_then + 10)
    assert page.eval_on_selector("#terminal", "t => t.scrollTop") == 0, "it scrolled while paused"
    assert page.is_visible("#jump-bottom")

    page.evaluate("window.airlockTerminal.socket.close()")  # the network drops
    wait_for(lambda: page.get_attribute("#terminal", "data-state") == "reconnecting", timeout=5)
    page.click("#jump-bottom")
    wait_for(lambda: page.get_attribute("#terminal", "data-state") == "done", timeout=60)
    assert terminal_text(page) == expected_text(120), "a gap or a repeat after reconnecting"
    at_bottom = "t => t.scrollHeight - t.scrollTop - t.clientHeight < 8"
    assert page.eval_on_selector("#terminal", at_bottom), "following again after the jump"


def test_a_decision_that_lost_the_race_says_why(server, login):
    proposal = server.propose_script("import os\nprint(os.getppid())", reason="race")
    page = login("reviewer")
    page.goto(f"{server.base}/proposals/{proposal['id']}/")
    # Deaf to live updates, as if the socket were down: the stale form is still there.
    page.evaluate("document.body.addEventListener('htmx:wsBeforeMessage', e => e.preventDefault())")
    other = login("reviewer2")
    other.goto(f"{server.base}/proposals/{proposal['id']}/")
    other.fill("#decision-comment", "no")
    other.click("#reject-button")
    other.wait_for_selector(".status-rejected")

    page.click("#approve-button")
    page.wait_for_selector("#decision-error")
    assert "rejected, not pending" in page.inner_text("#decision-error")
    assert page.is_visible(".status-rejected")


def test_a_burst_of_proposals_fills_the_queue_and_leaves_a_few_notices(server, login):
    page = login("reviewer")
    page.evaluate("window.__noReload = true")
    burst = [
        server.propose_script(f"import os\nprint(os.getpid(), {i})\n", reason=f"burst {i}")
        for i in range(12)  # each its own: identical ones would be one row
    ]
    assert all(proposal["status"] == "pending" for proposal in burst), burst
    for proposal in burst:  # every one reaches the open queue, without a reload
        page.wait_for_selector(f"#proposal-row-{proposal['id']}")
    newest = burst[-1]["id"]
    page.wait_for_selector(f"#notices a[href='/proposals/{newest}/']")
    assert page.locator("#notices .notice").count() <= 5  # not a wall of them over the queue
    assert page.evaluate("window.__noReload") is True
