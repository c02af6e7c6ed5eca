"""Credentials in a proposal and in its run's output: masked wherever they are shown or kept.

The issue's acceptance test: a script with an AWS key id, a GitHub token and a private
key in its code, its reason and its output. The agent's and the reviewers' API, the
console's pages, the Slack stand-in, the mail inbox, a webhook, the audit trail (its
rows, its export and what a real rsyslog receiver got), the retention archive and the
logs hold none of them; the run, given the originals, printed their right lengths. A
reviewer who proves a second factor just now sees them, and that is audited. An admin's
``secret_patterns`` mask what they match; ordinary proposals are stored as sent. Then the
same against a real ``serve`` (its console, the ``airlock`` command): every file of its
data directory, the SQLite database's bytes among them, holds none.

The secrets are made at run time (this tree is scanned for secrets, and a literal one
would be found); a value counts as shown when anything past its first four characters
is (its masked form keeps those: ``AKIA…``), or any line of the key's body.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import re
import secrets
import string
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from approvals.core.tokens import create_user_token
from approvals.models import Proposal
from approvals.notify.models import Webhook
from approvals.retention import passes, proposals
from audit.models import AuditEvent
from audit.shipping import ship
from executions import services as executions
from executions.models import Execution, OutputChunk
from infrastructure.archive import Archive
from tests.approvals.slack_support import ROUTES
from tests.approvals.test_cascade import endpoint, propose  # noqa: F401 (fixture)
from tests.audit.receivers import RSYSLOGD, Rsyslog, wait_for
from tests.conftest import client_for, use_policy
from tests.console.conftest import logged_in
from tests.serving import DEMO_PASSWORD, start_server
from tests.support import require

CREDENTIAL = "carries a credential"
ELLIPSIS = "…"


@dataclass(frozen=True)
class Secrets:
    """An AWS access key id, a GitHub token and an RSA private key (PEM), made just now."""

    aws: str
    github: str
    pem: str

    @classmethod
    def make(cls) -> Secrets:
        pick = random.SystemRandom().choices
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
        return cls(
            aws="AKIA" + "".join(pick(string.ascii_uppercase + string.digits, k=16)),
            github="ghp_" + "".join(pick(string.ascii_letters + string.digits, k=36)),
            pem=pem,
        )

    @property
    def needles(self) -> dict[str, str]:
        """What must never show, by what it is part of."""
        body = self.pem.strip().splitlines()[1:-1]
        found = {"the AWS key id": self.aws[4:], "the GitHub token": self.github[4:]}
        return found | {f"line {n} of the private key": line for n, line in enumerate(body, 1)}

    @property
    def key_masked(self) -> str:
        """The key's masked form: its BEGIN and END lines around "…"."""
        lines = self.pem.strip().splitlines()
        return f"{lines[0]}\n{ELLIPSIS}\n{lines[-1]}"

    def script(self) -> str:
        """Python that holds all three and prints their lengths, then the values themselves."""
        return (
            "import os, sys\n"  # risk 6: held for one reviewer, below the step-up
            f'KEY = "{self.aws}"\n'
            f'TOKEN = "{self.github}"\n'
            f'PEM = """{self.pem}"""\n'
            "print(len(KEY), len(TOKEN), len(PEM))\n"
            "print(KEY)\n"
            "print(TOKEN)\n"
            "print(TOKEN, file=sys.stderr)\n"
            "print(PEM)\n"
            "print(bool(os.getcwd()))\n"
        )

    def reason(self) -> str:
        return f"check that the deploy token {self.github} still reads the bucket"

    def lengths(self) -> str:
        return f"20 40 {len(self.pem)}"

    def shown(self, text: str | bytes) -> list[str]:
        """What of the secrets ``text`` shows (named, not quoted)."""
        if isinstance(text, bytes):
            return [what for what, raw in self.needles.items() if raw.encode() in text]
        return [what for what, raw in self.needles.items() if raw in text]

    def assert_hidden(self, where: str, text: str | bytes) -> None:
        shown = self.shown(text)
        assert not shown, f"{where} shows {', '.join(shown)}"


@pytest.fixture
def creds() -> Secrets:
    return Secrets.make()


def as_text(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


def the_script(creds: Secrets) -> dict:
    return {
        "action": "script.execute",
        "parameters": {"language": "python", "code": creds.script()},
        "reason": creds.reason(),
    }


# --- in-process: every place a proposal and its run are shown or kept ----------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("local_sandbox", "reviewer_with_mail")
def test_a_scripts_credentials_show_nowhere_and_it_ran_with_them(
    creds, agent_api, reviewer, reviewer_api, admin_user, slack, smtp, endpoint,  # noqa: F811
    eager_tasks, caplog, tmp_path,
):  # fmt: skip
    caplog.set_level(logging.DEBUG)
    use_policy(high_risk_at=11, slack_routes=ROUTES)
    Webhook.objects.create(name="ops", url=endpoint.url + "/hook", secret=secrets.token_hex(8))
    with eager_tasks(execute=True):
        answer = propose(agent_api, the_script(creds))
    assert answer["status"] == "pending"
    creds.assert_hidden("the answer to the agent", as_text(answer))
    code = answer["parameters"]["code"]
    assert f'KEY = "AKIA{ELLIPSIS}"' in code and f'TOKEN = "ghp_{ELLIPSIS}"' in code
    assert f'PEM = """{creds.key_masked}' in code
    assert answer["reason"] == f"check that the deploy token ghp_{ELLIPSIS} still reads the bucket"
    pk = answer["id"]
    apis = {"agent": agent_api, "reviewer": reviewer_api}
    assert_proposal_hidden(creds, pk, apis)
    console = logged_in(reviewer)
    page = console.get(f"/proposals/{pk}/").content.decode()
    assert f"AKIA{ELLIPSIS}" in page
    creds.assert_hidden("the console's proposal page", page)

    with eager_tasks(execute=True):
        decided = reviewer_api.post(f"/api/v1/proposals/{pk}/approve", {}, format="json").json()
    assert decided["status"] == "approved", decided
    creds.assert_hidden("the answer to the approval", as_text(decided))
    with eager_tasks(execute=True):
        executions.run(decided["execution_id"])
    assert_run_hidden(creds, decided["execution_id"], apis)
    for path in (
        f"/executions/{decided['execution_id']}/",
        f"/proposals/{pk}/",
        "/queue/",
        "/history/",
    ):
        response = console.get(path)
        assert response.status_code == 200, path
        creds.assert_hidden(f"the console's {path}", response.content.decode())

    assert_notifications_hidden(creds, slack, smtp, endpoint)
    assert_audit_hidden(creds, client_for(create_user_token(admin_user)), tmp_path / "rsyslog")
    archive = Archive(str(tmp_path / "archive"))
    passes.run(
        passes.Keep(output=30, proposals=30, audit=30),
        archive,
        now=timezone.now() + timedelta(days=40),
    )
    assert proposals.archived(archive, proposal=pk)["reason"] == answer["reason"]
    assert not Proposal.objects.filter(pk=pk).exists()
    assert_archive_hidden(creds, tmp_path / "archive")

    logged = caplog.text + "\n".join(str(record.__dict__) for record in caplog.records)
    creds.assert_hidden("the logs", logged)


def assert_proposal_hidden(creds: Secrets, pk: int, apis: dict) -> None:
    """The proposal as the API answers it, as it is stored, and why its risk."""
    for who, api in apis.items():
        one, listed = api.get(f"/api/v1/proposals/{pk}"), api.get("/api/v1/proposals")
        assert one.status_code == listed.status_code == 200
        assert f"AKIA{ELLIPSIS}" in one.json()["parameters"]["code"]
        creds.assert_hidden(f"the proposal read by the {who}", one.content.decode())
        creds.assert_hidden(f"the proposals listed to the {who}", listed.content.decode())
    row = Proposal.objects.get(pk=pk)
    assert row.sealed and not creds.shown(row.sealed)
    stored = [row.parameters, row.reason, row.summary, row.risk_reasons, row.decision_path]
    creds.assert_hidden("the proposal's row", as_text(stored))
    [reason] = [r for r in row.risk_reasons if r.startswith(CREDENTIAL)]
    assert all(kind in reason for kind in ("AWS", "GitHub", "private key")), reason


def assert_run_hidden(creds: Secrets, execution_id: int, apis: dict) -> None:
    """The run had the originals (it printed their lengths); its output shows none."""
    result = apis["agent"].get(f"/api/v1/executions/{execution_id}").json()
    assert result["status"] == "succeeded", result
    assert result["stdout"].splitlines()[0] == creds.lengths()
    assert f"\nAKIA{ELLIPSIS}\nghp_{ELLIPSIS}\n{creds.key_masked}\n" in result["stdout"]
    assert result["stdout"].endswith("\nTrue\n")  # what follows the key is kept
    assert result["stderr"] == f"ghp_{ELLIPSIS}\n"
    paths = [f"executions/{execution_id}", f"executions/{execution_id}/output", "executions"]
    for who, api in apis.items():
        for path in paths:
            response = api.get(f"/api/v1/{path}")
            assert response.status_code == 200
            creds.assert_hidden(f"/api/v1/{path} read by the {who}", response.content.decode())
    stored = OutputChunk.objects.filter(execution_id=execution_id).values_list("data", flat=True)
    creds.assert_hidden("the stored output", "".join(stored))
    execution = Execution.objects.get(pk=execution_id)
    assert execution.sealed and not creds.shown(as_text([execution.parameters, execution.sealed]))


def assert_notifications_hidden(creds: Secrets, slack, smtp, webhook) -> None:
    assert slack.called("chat.postMessage") and slack.called("chat.update")
    creds.assert_hidden("what Slack was sent", as_text(slack.calls))
    assert smtp.messages
    for message in smtp.messages:
        creds.assert_hidden(f"the mail {message['Subject']!r}", message.as_string())
        creds.assert_hidden(f"the mail {message['Subject']!r}", message.get_body().get_content())
    assert webhook.requests
    for request in webhook.requests:
        creds.assert_hidden("a webhook's request", request["body"])


def assert_audit_hidden(creds: Secrets, admin_api, rsyslog_dir: Path) -> None:
    """The audit records, their export, and what a real rsyslog got of them."""
    events = list(AuditEvent.objects.values("verb", "data"))
    assert {"proposal.submitted", "proposal.approved"} <= {e["verb"] for e in events}
    creds.assert_hidden("the audit records", as_text(events))
    exported = admin_api.get("/api/v1/audit")
    assert exported.status_code == 200
    creds.assert_hidden("the audit export", exported.content.decode())
    require(Path(RSYSLOGD).exists(), "rsyslogd is not installed (Debian: rsyslog)")
    with Rsyslog(rsyslog_dir) as receiver:
        shipped = ship.ship(ship.sink_for(f"syslog://127.0.0.1:{receiver.port}"))
        received = wait_for(receiver.messages, shipped)
    assert shipped == len(received) >= len(events)
    creds.assert_hidden("what the syslog receiver got", "\n".join(received))


def assert_archive_hidden(creds: Secrets, folder: Path) -> None:
    files = [path for path in folder.rglob("*") if path.is_file()]
    assert {path.parent.name for path in files} >= {"output", "proposals", "audit"}
    for path in files:
        data = path.read_bytes()
        creds.assert_hidden(path.name, gzip.decompress(data) if path.suffix == ".gz" else data)


def test_a_reviewer_with_a_fresh_factor_reveals_them_and_it_is_audited(
    creds, agent_api, reviewer, outsider
):
    pk = propose(agent_api, the_script(creds))["id"]
    revealed = logged_in(reviewer).post(f"/proposals/{pk}/reveal/")
    assert revealed.status_code == 200
    page = revealed.content.decode()
    assert creds.shown(page) == list(creds.needles)  # all of it, the key line by line
    assert creds.github in page  # in the reason too, not only in the code
    assert "no-store" in revealed["Cache-Control"]
    [event] = AuditEvent.objects.filter(verb="proposal.revealed")
    assert (event.actor, event.object_id) == ("user:rita", str(pk))
    creds.assert_hidden("the audit record of the reveal", as_text(event.data))

    stale = logged_in(reviewer, stepped_up=False).post(f"/proposals/{pk}/reveal/")
    assert stale.status_code == 302 and stale["Location"].startswith(reverse("accounts:step-up"))
    assert logged_in(reviewer).get(f"/proposals/{pk}/reveal/").status_code == 405
    outsiders = logged_in(outsider).post(f"/proposals/{pk}/reveal/")
    assert outsiders.status_code == 403
    creds.assert_hidden("the page an outsider gets", outsiders.content.decode())
    anonymous = Client().post(f"/proposals/{pk}/reveal/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    assert AuditEvent.objects.filter(verb="proposal.revealed").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("local_sandbox")
def test_an_admins_secret_pattern_masks_the_proposal_and_the_output(agent_api):
    pattern = r"corp-[0-9a-f]{12}"
    use_policy(
        allow=[{"kind": "action", "pattern": "script.execute", "note": "tests"}],
        secret_patterns=[pattern],
    )
    value = "corp-" + secrets.token_hex(6)
    # The second value is made by the script: only the pattern can know it.
    code = f'CORP = "{value}"\nprint(len(CORP))\nprint(CORP)\nprint("corp-%012x" % 0xC0FFEE)\n'
    answer = propose(
        agent_api,
        {"action": "script.execute", "parameters": {"language": "python", "code": code}},
    )
    assert answer["status"] == "approved"
    assert value not in as_text(answer)
    assert answer["parameters"]["code"].startswith(f'CORP = "corp{ELLIPSIS}"')
    assert any(f"secret pattern {pattern}" in r for r in answer["risk"]["reasons"])
    row = Proposal.objects.get(pk=answer["id"])
    assert row.sealed and value not in as_text([row.parameters, row.summary, row.risk_reasons])
    assert Execution.objects.get(pk=answer["execution_id"]).secret_patterns == [pattern]

    executions.run(answer["execution_id"])
    result = agent_api.get(f"/api/v1/executions/{answer['execution_id']}").json()
    assert result["status"] == "succeeded", result
    assert result["stdout"] == f"17\ncorp{ELLIPSIS}\ncorp{ELLIPSIS}\n"


ORDINARY = [
    ("script.execute", {"language": "python", "code": "print(6*7)"}),
    ("script.execute", {"language": "python", "code": "import os; os.listdir('/srv/cache')"}),
    ("script.execute", {"language": "bash", "code": "rm -rf /srv/cache/*"}),
    (
        "script.execute",
        {"language": "bash", "code": 'psql --password "$DB_PASSWORD" -c "select 1"'},
    ),
    ("script.execute", {"language": "python", "code": "password = input('password: ')"}),
    ("script.execute", {"language": "python", "code": 'print("corp-0123456789ab")'}),  # no pattern
    ("docker.restart_container", {"container": "payments-worker-7f3c9e2b1d04"}),
]


@pytest.mark.parametrize(("action", "parameters"), ORDINARY)
def test_ordinary_proposals_are_stored_as_sent(agent_api, action, parameters):
    reason = "clear the cache after the deploy of build 2291"
    answer = propose(agent_api, {"action": action, "parameters": parameters, "reason": reason})
    assert parameters.items() <= answer["parameters"].items() and answer["reason"] == reason
    row = Proposal.objects.get(pk=answer["id"])
    assert (row.parameters, row.reason, row.sealed) == (answer["parameters"], reason, None)
    assert not [r for r in row.risk_reasons if CREDENTIAL in r]


# --- a real serve: what it keeps on disk ---------------------------------------------


@pytest.mark.any_database
def test_a_real_serve_runs_them_and_keeps_none_of_them_on_disk(creds, tmp_path):
    data_dir = tmp_path / "data"
    server = start_server(data_dir, verbose=False)  # the worker's logs in logs/, as deployed
    try:
        made = server.propose_script(creds.script(), reason=creds.reason())
        assert made["status"] == "pending", made
        creds.assert_hidden("the answer to the agent", as_text(made))
        # The reviewer in the console (a token would cost a manage.py start of its own).
        console = console_session(server.base)
        page = console.get(f"{server.base}/proposals/{made['id']}/", timeout=30)
        creds.assert_hidden("the console's proposal page", page.text)
        approved = console.post(
            f"{server.base}/proposals/{made['id']}/approve/",
            data={"csrfmiddlewaretoken": csrf_token(page.text)},
            timeout=30,
        )
        assert approved.ok, approved.text
        creds.assert_hidden("the console's answer to the approval", approved.text)
        _, finished = server.api("GET", f"/api/v1/proposals/{made['id']}?wait=30&until=finished")
        assert finished["execution_status"] == "succeeded", finished
        creds.assert_hidden("the wait's answer", as_text(finished))
        _, result = server.api("GET", f"/api/v1/executions/{finished['execution_id']}")
        assert result["stdout"].splitlines()[0] == creds.lengths()
        assert f"\nAKIA{ELLIPSIS}\nghp_{ELLIPSIS}\n{creds.key_masked}\n" in result["stdout"]
        creds.assert_hidden("the run's result", as_text(result))
        ran = console.get(f"{server.base}/executions/{finished['execution_id']}/", timeout=30)
        assert ran.ok and creds.lengths() in ran.text
        creds.assert_hidden("the console's execution page", ran.text)
        shell = Shell(tmp_path / "home", server.base, server.token)
        shown = shell("show", str(made["id"]))
        assert f'KEY = "AKIA{ELLIPSIS}"' in shown and f"token ghp_{ELLIPSIS} still" in shown
        creds.assert_hidden("airlock show", shown)
        watched = shell("watch", str(finished["execution_id"]))
        assert creds.lengths() in watched
        creds.assert_hidden("airlock watch", watched)
        creds.assert_hidden("airlock queue", shell("queue", "--status", "all"))
    finally:
        server.stop()
    files = {path: path.read_bytes() for path in data_dir.rglob("*") if path.is_file()}
    assert data_dir / "serve.log" in files and any(p.parent.name == "logs" for p in files)
    database = files[data_dir / "airlock.sqlite3"]
    assert f"ghp_{ELLIPSIS}".encode() in database  # what was searched holds the proposal
    for path, data in files.items():
        creds.assert_hidden(str(path.relative_to(data_dir)), data)


def csrf_token(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def console_session(base: str) -> requests.Session:
    """The demo reviewer signed in to the console."""
    browser = requests.Session()
    page = browser.get(f"{base}/login/", timeout=30)
    login = {
        "login": "reviewer",
        "password": DEMO_PASSWORD,
        "csrfmiddlewaretoken": csrf_token(page.text),
    }
    signed_in = browser.post(f"{base}/login/", data=login, timeout=30)
    assert signed_in.ok and "/login/" not in signed_in.url, signed_in.url
    return browser


class Shell:
    """``airlock`` as a person runs it: logged in once, its config in ``home``."""

    def __init__(self, home: Path, url: str, token: str):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        self.env.update(XDG_CONFIG_HOME=str(home), COLUMNS="200", NO_COLOR="1")
        self("login", url, "--token", "-", stdin=token + "\n")

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        command = Path(sys.executable).with_name("airlock")
        done = subprocess.run(
            [command, *args], input=stdin, env=self.env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr
