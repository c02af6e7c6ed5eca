"""Browser tests: Debian's Chromium driven by Playwright against ``manage.py serve --demo``.

One server and one browser per module (starting them costs seconds); each
test opens fresh browser contexts, so logins and pages never leak between
tests. Not per session: Playwright's sync API keeps its event loop marked as
running in this thread while it is started, and Django then refuses database
access to whatever test runs next in the same worker. Without
Chromium the tests skip; under CI=true they fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.serving import DEMO_PASSWORD, Server, start_server
from tests.support import require

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1280, "height": 800}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the server's state and the end of its log to the report."""
    report = yield
    running = item.funcargs.get("server")
    if report.failed and isinstance(running, Server):
        code = running.process.poll()
        state = "running" if code is None else f"exited with {code}"
        tail = running.log.read_text(errors="replace")[-6000:]
        report.sections.append(("airlock server", f"serve: {state}\n{tail}"))
    failed_requests = getattr(item.funcargs.get("login"), "failed_requests", None)
    if report.failed and failed_requests:
        report.sections.append(("failed browser requests", "\n".join(failed_requests)))
    return report


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    require(CHROMIUM.exists(), f"browser tests need Chromium at {CHROMIUM}")
    running = start_server(tmp_path_factory.mktemp("airlock") / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser(server):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - the test extra installs it
        require(False, "browser tests need Playwright for Python")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS
        )
        yield chromium
        chromium.close()


def watch_policy(context, violations: list[str]) -> None:
    """Every page of ``context`` reports what the Content-Security-Policy refused to ``violations``."""
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'CSP violation: ' + e.violatedDirective + ' ' + (e.blockedURI || 'inline') + ' at ' +"
        " e.sourceFile + ':' + e.lineNumber));"
    )

    def on_page(page):
        page.on(
            "console",
            lambda message: (
                violations.append(f"{page.url}: {message.text}")
                if "Content Security Policy" in message.text or "CSP violation" in message.text
                else None
            ),
        )

    context.on("page", on_page)


@pytest.fixture
def csp_violations() -> Iterator[list[str]]:
    """What the console's Content-Security-Policy refused during the test: must stay empty."""
    violations: list[str] = []
    yield violations
    assert violations == [], "the console broke its own Content-Security-Policy"


@pytest.fixture
def login(browser, server, csp_violations) -> Iterator[Callable]:
    """login("reviewer") → a page of a fresh browser context, signed in on its landing page
    (the queue for a reviewer, the overview for an admin)."""
    contexts = []

    def open_as(username: str, viewport: dict | None = None):
        context = browser.new_context(viewport=viewport or VIEWPORT)
        context.set_default_timeout(20_000)
        watch_policy(context, csp_violations)
        contexts.append(context)
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm's "are you sure?"
        page.on(
            "requestfailed",
            lambda req: open_as.failed_requests.append(
                f"{username}: {req.method} {req.url}: {req.failure}"
            ),
        )
        page.goto(server.base + "/login/")
        page.fill("#id_login", username)
        page.fill("#id_password", DEMO_PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: url in (server.base + "/", server.base + "/overview/"))
        return page

    open_as.failed_requests = []
    yield open_as
    for context in contexts:
        context.close()


def wait_for(predicate: Callable[[], object], timeout: float = 30, interval: float = 0.2):
    """Poll until ``predicate()`` is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
