"""Triage in Chromium: a mixed queue of 20 cleared with the keyboard alone (its keystrokes
counted), browser notifications and the title's count while the console is in the
background, and axe-core's checks on the pages where reviewers decide.

The server's step-up starts at risk 7 (``STEP_UP_MIN_RISK``'s default, as in every browser
test) and so does the quorum of two: every proposal here stays below it, one reviewer
decides it with the session they have.
"""

from __future__ import annotations

import pytest

from tests.serving import ROOT, agent_token, reviewer_token
from tests.support import require

from .conftest import wait_for

pytestmark = pytest.mark.browser

AXE = ROOT / ".npm-tools" / "node_modules" / "axe-core" / "axe.min.js"
BELOW_STEP_UP = 7
APPROVED = ("script.execute", "tool.call")  # the rest (Docker, host) this reviewer rejects

SCRIPTS = [
    ("import os\nprint(os.getloadavg())\n", "is web-2 overloaded?"),
    ("import shutil\nprint(shutil.disk_usage('/'))\n", "the disk alert on db-prod-1"),
    ("import socket\nprint(socket.gethostname())\n", "which host answers"),
    ("import os\nprint(sorted(os.listdir('/tmp'))[:5])\n", "what fills /tmp"),
    ("import os\nprint(os.cpu_count())\n", "size the worker pool"),
    ("import os\nprint(os.uname().release)\n", "the kernel for the CVE check"),
]
DOCKER = [
    ("docker.stop_container", {"container": "billing-worker-2"}, "its queue is stuck"),
    ("docker.prune_networks", {}, "networks left over by old deploys"),
]
HOST = [  # a host no worker serves: nothing would run here even if approved
    ("host.restart_service", {"service_name": "report-cache", "host": "worker-3"}, "stale"),
    ("host.stop_service", {"service_name": "report-cache", "host": "worker-3"}, "retired"),
    ("host.kill_process", {"target": "4242", "host": "worker-3"}, "a runaway export"),
    ("host.exec", {"command": "df -i /var", "host": "worker-3"}, "inodes running out?"),
]
TOOLS = [
    ("billing.refund", {"order": "A-1042", "cents": 1250}, "a double charge"),
    ("crm.lookup", {"email": "ana@example.com"}, "who opened ticket 881"),
]
IDENTICAL = 6  # the same inventory.sync, as an agent that retries makes it

# Every page of the context: window.Notification records what the console shows, and the
# page can be sent to the background (document.hidden) without another window.
BACKGROUND_AND_RECORD = """
(() => {
  window.__notifications = [];
  const Real = window.Notification;
  if (Real) {
    window.Notification = class extends Real {
      constructor(title, options) {
        super(title, options);
        window.__notifications.push({ title, body: (options || {}).body, tag: (options || {}).tag });
      }
    };
  }
  let hidden = false;
  window.__setHidden = (value) => {
    hidden = value;
    document.dispatchEvent(new Event("visibilitychange"));
  };
  Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
  Object.defineProperty(document, "visibilityState", {
    configurable: true, get: () => (hidden ? "hidden" : "visible"),
  });
  document.addEventListener("htmx:wsOpen", () => { window.__live = true; });
})();
"""


@pytest.fixture(scope="module")
def as_reviewer(server) -> str:
    """A personal API token of the demo reviewer: to read and decide any proposal."""
    return reviewer_token(server.log.parent)


def propose(server, action: str, parameters: dict, reason: str, token: str | None = None):
    status, made = server.api(
        "POST",
        "/api/v1/proposals",
        {"action": action, "parameters": parameters, "reason": reason},
        token=token,
    )
    assert status == 201 and made["status"] == "pending", made
    assert made["risk"]["score"] < BELOW_STEP_UP, made  # no step-up, no second reviewer
    return made


def script(server, code: str, reason: str) -> dict:
    parameters = {"language": "python", "code": code, "timeout_seconds": 30}
    return propose(server, "script.execute", parameters, reason)


def tool_call(server, tool: str, arguments: dict, reason: str) -> dict:
    return propose(server, "tool.call", {"tool": tool, "arguments": arguments}, reason)


def mixed_queue(server) -> list[dict]:
    """20 pending proposals: 6 scripts, 2 Docker and 4 host actions, 2 tool calls and 6
    identical ones. The demo agent may not act on services: an ops agent proposes those."""
    ops = agent_token(server.log.parent, "ops-agent", "host.*")
    made = [script(server, code, reason) for code, reason in SCRIPTS]
    made += [propose(server, *docker) for docker in DOCKER]
    made += [propose(server, *host, token=ops) for host in HOST]
    made += [tool_call(server, *tool) for tool in TOOLS]
    made += [
        tool_call(server, "inventory.sync", {"warehouse": "eu-1"}, "nightly sync")
        for _ in range(IDENTICAL)
    ]
    return made


def queue_rows(page) -> list[dict]:
    return page.eval_on_selector_all(
        "#queue-list tr[data-proposal]",
        """rows => rows.map(row => ({
            id: row.dataset.proposal,
            ids: (row.dataset.ids || row.dataset.proposal).split(","),
            action: row.querySelector("td[data-label=Action] code").textContent,
        }))""",
    )


class Keyboard:
    """The reviewer's hands: every key pressed is counted."""

    def __init__(self, page):
        self.page, self.count = page, 0

    def press(self, key: str, times: int = 1) -> None:
        for _ in range(times):
            self.page.keyboard.press(key)
            self.count += 1


def pick_and_decide(page, keys: Keyboard, decide: str, picking) -> None:
    """Walk the queue from its first row, pick (x) the rows ``picking(row)`` chooses, then
    decide them together (a or r) through the confirm dialog."""
    rows = queue_rows(page)
    chosen = [i for i, row in enumerate(rows) if picking(row)]
    assert page.get_attribute("tr.selected", "data-proposal") == rows[0]["id"]
    at = 0
    for index in chosen:
        keys.press("j", index - at)
        at = index
        keys.press("x")
    wanted = sorted(pk for i in chosen for pk in rows[i]["ids"])
    assert page.locator("#queue-list tr.picked").count() == len(chosen)
    keys.press(decide)
    assert page.is_visible("#confirm-decision")
    listed = page.eval_on_selector_all("#confirm-form input[name=ids]", "i => i.map(e => e.value)")
    assert sorted(listed) == wanted
    if decide == "r":
        keys.press("Tab")  # from the comment (optional) to the Reject button
    assert page.evaluate("document.activeElement.id") == "confirm-submit"
    with page.expect_navigation():
        keys.press("Enter")


def test_a_mixed_queue_of_20_is_cleared_with_the_keyboard_alone(server, login, as_reviewer):
    made = mixed_queue(server)
    assert len(made) == 20
    ids = {str(p["id"]) for p in made}
    page = login("reviewer")  # lands on the queue, its first row under the cursor
    wait_for(lambda: {pk for row in queue_rows(page) for pk in row["ids"]} == ids)
    assert page.title() == "Needs me (20) · Airlock"
    grouped = [row for row in queue_rows(page) if len(row["ids"]) > 1]
    assert [len(row["ids"]) for row in grouped] == [IDENTICAL]
    assert page.inner_text(f"#proposal-row-{grouped[0]['id']} .group-count") == f"×{IDENTICAL}"
    assert len(queue_rows(page)) == 20 - IDENTICAL + 1

    keys = Keyboard(page)
    pick_and_decide(page, keys, "a", lambda row: row["action"] in APPROVED)
    wait_for(lambda: all(row["action"] not in APPROVED for row in queue_rows(page)))
    pick_and_decide(page, keys, "r", lambda row: True)
    page.wait_for_selector("#queue-list .empty")
    assert queue_rows(page) == []
    assert page.title() == "Needs me · Airlock"

    for proposal in made:
        _, body = server.api("GET", f"/api/v1/proposals/{proposal['id']}", token=as_reviewer)
        kind, status = (
            ("approve", "approved") if proposal["action"] in APPROVED else ("reject", "rejected")
        )
        assert body["status"] == status, body
        assert [(d["kind"], d["reviewer"]) for d in body["decisions"]] == [(kind, "reviewer")]
    print(f"[triage] {len(made)} proposals cleared in {keys.count} keys")


def test_a_new_proposal_is_a_browser_notification_while_the_console_is_in_the_background(
    server, login
):
    page = login("reviewer")
    page.context.grant_permissions(["notifications"], origin=server.base)
    page.context.add_init_script(BACKGROUND_AND_RECORD)
    page.goto(server.base + "/profile/")
    assert page.inner_text("#browser-notifications-state") == "Off in this browser."
    page.click("#browser-notifications-toggle")
    wait_for(lambda: page.inner_text("#browser-notifications-state") == "On in this browser.")
    assert page.evaluate("localStorage.getItem('airlock.notifications')") == "on"
    assert page.inner_text("#browser-notifications-toggle") == "Turn off"

    # A page with no live view of its own (the history), then the queue with its own.
    made = notified_on(page, server, "/history/", "History")
    made += notified_on(page, server, "/", "Needs me", count="#mine-count")
    for proposal in made:  # leave the queue as it was
        assert server.api("POST", f"/api/v1/proposals/{proposal['id']}/withdraw")[0] == 200


def notified_on(page, server, path: str, name: str, count: str = "") -> list[dict]:
    """On ``path``: a proposal made while the page is in the background is a browser
    notification, one made while it is in front only a notice; the title counts both, after
    the page's name where it shows the count (``count``: the queue's tab), else in front."""
    made = []

    def title_is_live() -> bool:
        n = int(page.inner_text(count or "#pending-count"))
        if count:
            return page.title() == (f"{name} ({n}) · Airlock" if n else f"{name} · Airlock")
        return page.title() == (f"({n}) {name} · Airlock" if n else f"{name} · Airlock")

    def waiting() -> int:
        return int(page.inner_text("#pending-count"))

    page.goto(server.base + path)
    page.wait_for_function("() => window.__live === true")
    wait_for(title_is_live)
    told, before = page.evaluate("window.__notifications.length"), waiting()

    page.evaluate("window.__setHidden(true)")  # another tab in front
    made.append(script(server, "import os\nprint(os.getppid())\n", f"background {path}"))
    page.wait_for_function(f"() => window.__notifications.length > {told}")
    shown = page.evaluate("window.__notifications")[-1]
    assert shown["title"] == f"#{made[-1]['id']} script.execute waits for review", shown
    assert f"background {path}" in shown["body"] and "risk " in shown["body"], shown
    assert shown["tag"] == f"airlock-proposal-{made[-1]['id']}"
    wait_for(lambda: waiting() == before + 1)
    wait_for(title_is_live)  # in the background too

    page.evaluate("window.__setHidden(false)")  # back in front: the notice is enough
    made.append(script(server, "import os\nprint(os.getpgrp())\n", f"in front {path}"))
    page.wait_for_selector(f"#notices a[href='/proposals/{made[-1]['id']}/']")
    wait_for(lambda: waiting() == before + 2)
    wait_for(title_is_live)
    page.wait_for_timeout(1500)  # longer than a burst's pause (console.js)
    assert page.evaluate("window.__notifications.length") == told + 1
    return made


def axe_violations(page) -> list[dict]:
    return page.evaluate(
        """async () => (await axe.run(document)).violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ")),
        }))"""
    )


def test_axe_finds_nothing_serious_on_the_queue_proposal_execution_and_overview(
    server, login, as_reviewer
):
    require(AXE.exists(), f"the accessibility checks need axe-core at {AXE} (scripts/test)")
    ran = script(server, "import os\nprint('checked', os.getcwd())\n", "axe: something to run")
    _, approved = server.api(
        "POST",
        f"/api/v1/proposals/{ran['id']}/approve",
        {"comment": "for the axe run"},
        token=as_reviewer,
    )
    assert approved["status"] == "approved", approved
    risky = script(server, "import os\nprint(sorted(os.listdir('/tmp'))[:3])\n", "axe: a risk line")
    tool_call(server, "crm.lookup", {"email": "axe@example.com"}, "axe: a tool call")

    page = login("reviewer")
    # Through the DevTools protocol, as the console's Content-Security-Policy (script-src
    # 'self') refuses a script tag added to the page (Playwright's add_script_tag).
    page.context.add_init_script(path=str(AXE))
    pages = {
        "queue": "/",
        "proposal": f"/proposals/{risky['id']}/",
        "execution": f"/executions/{wait_for(lambda: execution_of(server, ran))}/",
        "overview": "/overview/",
    }
    found = {}
    for name, path in pages.items():
        page.goto(server.base + path)
        if name == "queue":  # a row under the cursor and a row picked
            page.wait_for_selector("#queue-list tr[data-proposal]")
            page.keyboard.press("x")
            page.keyboard.press("j")
        if name == "proposal":
            page.wait_for_selector(".code-block .hll")
        if name == "execution":
            page.wait_for_selector("#terminal[data-state=done]")
        violations = axe_violations(page)
        found[name] = [v for v in violations if v["impact"] in ("serious", "critical")]
        others = len(violations) - len(found[name])
        print(f"[axe] {name} ({path}): {len(found[name])} serious or critical, {others} other")
        for violation in violations:
            print(f"[axe]   {violation}")
    assert found == {name: [] for name in pages}


def execution_of(server, proposal: dict) -> int | None:
    return server.api("GET", f"/api/v1/proposals/{proposal['id']}")[1].get("execution_id")
