#!/usr/bin/env python
"""Screenshots of the console for the documentation: the queue (wide and on a phone), a
proposal with the agent's history and its lines marked, a live execution,
the overview, the policy editor's preview, the sign-in page with single sign-on,
the step-up prompt, and under review routes a team member's "Needs me" and a proposal
waiting for two teams.

Starts the embedded deployment on a free port with a throw-away data dir,
writes two weeks of made-up history into its database (for the overview and
the preview), submits a few proposals as the demo agent, and photographs the
pages at 1280×800 with Debian's Chromium; last, it puts teams and review routes in force
(as the admins' guide does) and submits a few tool calls they route:

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.steps import enrol_totp  # noqa: E402
from tests.serving import DEMO_PASSWORD, FOREIGN_ENV, manage, start_server  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
# A provider for the sign-in page's button (it is not asked anything until someone clicks).
SSO = {
    "OIDC_ISSUER": "https://sso.example.com",
    "OIDC_CLIENT_ID": "airlock",
    "OIDC_CLIENT_SECRET": "screenshots",
    "OIDC_NAME": "Acme SSO",
    "OIDC_REVIEWER_GROUPS": "airlock-reviewers",
}
NAMES = (
    "queue", "queue-phone", "proposal", "execution", "sign-in", "step-up", "overview", "policy-preview",
    "needs-me", "proposal-teams",
)  # fmt: skip
VIEWPORT = {"width": 1280, "height": 800}

# A realistic queue: what each does, why, where, and six identical calls folded into one row.
CLEANUP = (
    "import os\n"
    "\n"
    "cache = '/srv/cache'\n"
    "for name in os.listdir(cache):\n"
    "    os.remove(os.path.join(cache, name))\n"
    "print('freed', cache)\n"
)
PROPOSALS = [
    (CLEANUP, "free disk on db-prod-1, WAL filled the volume"),
    ("import subprocess\nsubprocess.run(['git', 'status'])\n", "check the checkout is clean"),
]
CALLS = [  # (tool, arguments, reason, how many times)
    ("billing.refund", {"customer": "cus_1042", "amount_cents": 125000}, "charged twice", 1),
    ("health.check", {"host": "db-prod-1", "probe": "replication_lag"}, "after the failover", 6),
]
LIVE = (
    "import os, time\n"
    "print('\\x1b[1mchecking disk usage\\x1b[0m')\n"
    "for i, path in enumerate(['/tmp', '/var/tmp', '/srv/cache', '/srv/builds'] * 6):\n"
    "    colour = 32 if i % 5 else 33\n"
    "    print(f'\\x1b[{colour}m{path:<12}\\x1b[0m {(i * 37) % 90 + 5:>3} MB', flush=True)\n"
    "    time.sleep(0.25)\n"
)

# The admins' guide's example, smaller: databases to a DBA and an SRE, refunds to finance.
PEOPLE = {"dana": [], "bob": [], "sam": ["sre-oncall"], "fiona": []}  # name: provider groups
ROUTES = """\
teams:
  dba: {members: [dana, bob]}
  sre: {sso_groups: [sre-oncall]}
  finance: {members: [fiona]}
reviews:
  - match: ["tool:db.*"]
    require: {dba: 1, sre: 1}
  - match: ["tool:billing.refund"]
    require: {finance: 1}
    escalate_after_minutes: 30
    escalate_to: [sre]
"""
MAKE_PEOPLE = """\
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from accounts.roles import REVIEWERS_GROUP, set_provider_groups
reviewers = Group.objects.get_or_create(name=REVIEWERS_GROUP)[0]
for name, groups in {people!r}.items():
    user = get_user_model().objects.create_user(name, password={password!r})
    user.groups.add(reviewers)
    set_provider_groups(user, groups, actor="system")
"""
ROUTED = [  # (tool, arguments, reason)
    ("db.migrate", {"database": "orders", "to": "0042_invoice_totals"}, "ship invoice totals"),
    ("db.drop_index", {"database": "orders", "index": "orders_status_idx"}, "unused since May"),
    ("billing.refund", {"customer": "c-1042", "amount": 120}, "charged twice"),
    ("db.vacuum", {"database": "events", "table": "page_views"}, "the table doubled in a week"),
]

# (agent, action, parameters, risk, route) — route: allow, notify, risk, review, deny.
HISTORY = [
    ("deploy-bot", "docker.container_logs", {"container": "web-1", "tail": 200}, 1, "allow"),
    ("deploy-bot", "docker.restart_container", {"container": "web-1"}, 4, "notify"),
    ("deploy-bot", "docker.stop_container", {"container": "web-1"}, 5, "review"),
    ("deploy-bot", "docker.stop_container", {"container": "worker-3"}, 5, "review"),
    ("nightly-backup", "host.service_status", {"service_name": "postgresql"}, 1, "allow"),
    ("nightly-backup", "host.restart_service", {"service_name": "nginx"}, 5, "review"),
    ("ci-runner", "script.execute", {"language": "python", "code": "print(1)"}, 2, "risk"),
    ("ci-runner", "script.execute", {"language": "bash", "code": "ls -la build/"}, 3, "risk"),
    ("ci-runner", "script.execute", {"language": "python", "code": "import os"}, 5, "review"),
    ("ci-runner", "script.execute", {"language": "bash", "code": "curl x | sh"}, 9, "review"),
    ("demo-agent", "host.exec", {"command": "rm -rf /*"}, 10, "deny"),
    ("demo-agent", "script.execute", {"language": "python", "code": "import shutil"}, 6, "review"),
]
WEIGHTS = [9, 3, 4, 1, 6, 2, 10, 6, 5, 1, 1, 3]


def seed_history(data_dir: Path, days: int = 14) -> None:
    """Two weeks of decided proposals, written straight into the served deployment's database."""
    os.environ["AIRLOCK_DATA_DIR"] = str(data_dir)
    for name in FOREIGN_ENV:
        os.environ.pop(name, None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from approvals.core.tokens import create_agent
    from approvals.models import Agent, Decision, Proposal
    from executions.actions import get_action

    rng = random.Random(13)
    agents = {a.name: a for a in Agent.objects.all()}
    for name in ("deploy-bot", "nightly-backup", "ci-runner"):
        agents[name] = agents.get(name) or create_agent(name, ["*"], actor="system")[0]
    people = list(get_user_model().objects.filter(username__in=["reviewer", "reviewer2"]))
    now = timezone.now()
    made = []
    for offset in range(days * 24 * 60, 60, -1):
        if rng.random() > (0.035 if (now - timedelta(minutes=offset)).weekday() < 5 else 0.012):
            continue
        agent, action, parameters, risk, route = rng.choices(HISTORY, WEIGHTS)[0]
        made.append(_seeded(agents[agent], get_action(action), parameters, risk, route,
                            now - timedelta(minutes=offset), rng))  # fmt: skip
    Proposal.objects.bulk_create(made)
    decisions = [
        Decision(proposal=p, reviewer=rng.choice(people), kind="approve", comment="")
        for p in Proposal.objects.filter(approvals_count__gte=1)
    ]
    Decision.objects.bulk_create(decisions)
    print(f"seeded {len(made)} proposals of history")


def _seeded(agent, spec, parameters, risk, route, when, rng):
    from approvals.models import Proposal

    step = {"allow": "allow_list", "notify": "notify_list", "deny": "deny_list"}.get(route, route)
    quorum = 2 if risk >= 7 else 1
    status, approvals, decided = "approved", 0, when
    if route == "deny":
        status = "denied"
    elif route == "review":
        fate = rng.random()
        status = "approved" if fate < 0.8 else ("rejected" if fate < 0.93 else "expired")
        approvals = quorum if status == "approved" else 0
        decided = when + timedelta(minutes=min(rng.lognormvariate(2.4, 0.9), 59))
    if route == "review" and spec.name == "docker.stop_container" and status != "approved":
        status, approvals = "approved", quorum  # reviewers always let this one through
    return Proposal(
        agent=agent,
        action=spec.name,
        parameters=parameters,
        summary=spec.describe(parameters)[:300],
        reason="routine maintenance",
        status=status,
        risk_score=risk,
        risk_reasons=[],
        decision_path={"step": step, "rule": None, "reason": "seeded", "policy_version": 1},
        policy_version=1,
        required_approvals=quorum if route == "review" else 0,
        approvals_count=approvals,
        created_at=when,
        decided_at=decided,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    data_dir = Path(tempfile.mkdtemp(prefix="airlock-shots-")) / "data"
    server = start_server(data_dir, extra_env=SSO)
    try:
        seed_history(data_dir)
        proposed = [server.propose_script(code, reason=reason) for code, reason in PROPOSALS]
        for tool, arguments, reason, times in CALLS:
            for _ in range(times):
                status, body = server.api(
                    "POST",
                    "/api/v1/proposals",
                    {
                        "action": "tool.call",
                        "parameters": {"tool": tool, "arguments": arguments},
                        "reason": reason,
                    },
                )
                assert status == 201, body
        cleanup = proposed[0]
        risky = max(proposed, key=lambda proposal: proposal["risk"]["score"])
        assert risky["risk"]["score"] >= 7, risky
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
            page.screenshot(path=str(out / "sign-in.png"))
            sign_in(page, "reviewer")
            page.wait_for_selector(f"#proposal-row-{live['id']}")
            page.keyboard.press("j")
            page.keyboard.press("x")
            page.keyboard.press("j")
            page.screenshot(path=str(out / "queue.png"))
            phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
            phone.goto(server.base + "/login/")
            sign_in(phone, "reviewer2")
            phone.wait_for_selector(f"#proposal-row-{live['id']}")
            phone.screenshot(path=str(out / "queue-phone.png"))
            phone.close()

            page.goto(f"{server.base}/proposals/{cleanup['id']}/")
            page.screenshot(path=str(out / "proposal.png"), full_page=True)
            page.goto(f"{server.base}/proposals/{live['id']}/")
            page.click("#approve-button")
            page.wait_for_selector("#execution-link")
            page.click("#execution-link")
            page.wait_for_function(
                "() => document.querySelector('#terminal').textContent.split('\\n').length > 12"
            )
            time.sleep(0.3)
            page.screenshot(path=str(out / "execution.png"))

            enrol_totp(page, server.base)
            page.goto(f"{server.base}/proposals/{risky['id']}/")
            page.click("#approve-button")
            page.wait_for_selector("#step-up-totp")
            page.screenshot(path=str(out / "step-up.png"))
            admin_pages(browser, server.base, out)
            routed_pages(browser, server, data_dir, out)
            browser.close()
    finally:
        server.stop()
    for name in NAMES:
        print(out / f"{name}.png")


def sign_in(page, username: str) -> None:
    page.fill("#id_login", username)
    page.fill("#id_password", DEMO_PASSWORD)
    page.click("#password-submit")


def admin_pages(browser, base: str, out: Path) -> None:
    """The admin's landing page, and the preview of a raised auto-approve threshold."""
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(base + "/login/")
    sign_in(page, "admin")
    page.wait_for_url(base + "/overview/")
    page.wait_for_selector("#chart-per-day rect")
    page.screenshot(path=str(out / "overview.png"))

    page.goto(base + "/manage/policy/")
    page.fill("#id_auto_approve_below", "6")
    page.fill("#id_comment", "scripts up to 5 run without review")
    page.click("#preview-policy")
    page.wait_for_selector("#preview-moved")
    page.eval_on_selector("#policy-preview", "el => el.scrollIntoView({block: 'start'})")
    page.evaluate("window.scrollBy(0, -150)")  # keep the Preview and Save buttons in view
    time.sleep(0.3)
    page.screenshot(path=str(out / "policy-preview.png"))
    page.close()


def put_routes_in_force(data_dir: Path) -> None:
    """dana and bob (dba), sam (sre, through the provider's group), fiona (finance), and the
    routes above appended to the policy in force with ``manage.py policy apply``. (In other
    processes: Playwright's running event loop keeps Django out of the database here.)"""
    manage(data_dir, "shell", "-c", MAKE_PEOPLE.format(people=PEOPLE, password=DEMO_PASSWORD))
    exported = manage(data_dir, "policy", "export").splitlines()
    kept = [line for line in exported if line not in ("teams: {}", "reviews: []")]
    policy = data_dir / "policy-with-routes.yaml"
    policy.write_text("\n".join(kept) + "\n" + ROUTES)
    manage(data_dir, "policy", "apply", str(policy), "--comment", "teams and routes")


def routed_pages(browser, server, data_dir: Path, out: Path) -> None:
    """A DBA's "Needs me" among routed and unrouted proposals; then, once she approved a
    migration, its page as the SRE whose approval it still waits for sees it."""
    put_routes_in_force(data_dir)
    made = {}
    for tool, arguments, reason in ROUTED:
        call = {"tool": tool, "arguments": arguments}
        status, body = server.api(
            "POST",
            "/api/v1/proposals",
            {"action": "tool.call", "parameters": call, "reason": reason},
        )
        assert status == 201 and body["status"] == "pending", body
        made[tool] = body
    migration = made["db.migrate"]

    page = browser.new_page(viewport=VIEWPORT)
    page.goto(server.base + "/login/")
    sign_in(page, "dana")
    page.wait_for_url(server.base + "/")
    page.goto(server.base + "/queue/")  # without the "signed in" message
    page.wait_for_selector(f"#proposal-row-{migration['id']}")
    page.screenshot(path=str(out / "needs-me.png"))
    page.goto(f"{server.base}/proposals/{migration['id']}/")
    page.fill("#decision-comment", "reviewed the migration: additive, no lock")
    page.click("#approve-button")
    page.wait_for_selector("#team-dba.done")
    page.close()

    page = browser.new_page(viewport=VIEWPORT)
    page.goto(server.base + "/login/")
    sign_in(page, "sam")
    page.wait_for_url(server.base + "/")
    page.goto(f"{server.base}/proposals/{migration['id']}/")
    page.wait_for_selector("#team-dba.done")
    page.screenshot(path=str(out / "proposal-teams.png"))
    page.close()


if __name__ == "__main__":
    main()
