#!/usr/bin/env python
"""Screenshots of the console for the README: the queue, a proposal, a live execution.

Starts the embedded deployment on a free port with a throw-away data dir,
submits a few proposals as the demo agent, and photographs the pages at
1280×800 with Debian's Chromium:

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.serving import DEMO_PASSWORD, start_server  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}

PROPOSALS = [
    ("import os\nos.system('rm -rf /tmp/build-cache')\n", "free disk space on the runner"),
    ("import os\nprint(os.listdir('/var/log'))\n", "find the noisy log file"),
    ("import subprocess\nsubprocess.run(['git', 'status'])\n", "check the checkout is clean"),
]
LIVE = (
    "import os, time\n"
    "print('\\x1b[1mchecking disk usage\\x1b[0m')\n"
    "for i, path in enumerate(['/tmp', '/var/tmp', '/srv/cache', '/srv/builds'] * 6):\n"
    "    colour = 32 if i % 5 else 33\n"
    "    print(f'\\x1b[{colour}m{path:<12}\\x1b[0m {(i * 37) % 90 + 5:>3} MB', flush=True)\n"
    "    time.sleep(0.25)\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    server = start_server(Path(tempfile.mkdtemp(prefix="airlock-shots-")) / "data")
    try:
        for code, reason in PROPOSALS:
            server.propose_script(code, reason=reason)
        live = server.propose_script(LIVE, reason="see which cache directories grew")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                headless=True,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            page = browser.new_page(viewport=VIEWPORT)
            page.on("dialog", lambda dialog: dialog.accept())
            page.goto(server.base + "/login/")
            page.fill("#id_username", "reviewer")
            page.fill("#id_password", DEMO_PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_selector(f"#proposal-row-{live['id']}")
            page.keyboard.press("j")
            page.screenshot(path=str(out / "queue.png"))

            page.goto(f"{server.base}/proposals/{live['id']}/")
            page.screenshot(path=str(out / "proposal.png"))
            page.click("#approve-button")
            page.wait_for_selector("#execution-link")
            page.click("#execution-link")
            page.wait_for_function(
                "document.querySelector('#terminal').textContent.split('\\n').length > 12"
            )
            time.sleep(0.3)
            page.screenshot(path=str(out / "execution.png"))
            browser.close()
    finally:
        server.stop()
    for name in ("queue", "proposal", "execution"):
        print(out / f"{name}.png")


if __name__ == "__main__":
    main()
