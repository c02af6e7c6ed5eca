"""``airlock``, the command line, driven as a subprocess against a running ``serve``.

Each test runs the installed console script with a config directory of its
own, as a person or a CI job would: log in, read the queue, decide, run a
script behind approval and stream its output, and every fault (no login, a
server that is down, a refused token, a decided proposal, a step-up that is
not given) as one line and its own exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.serving import free_port, manage, start_server, user_token

AIRLOCK = Path(sys.executable).with_name("airlock")
MEDIUM = "import os\nprint(os.getcwd())\n"  # held for one reviewer, below the step-up risk
HIGH = "import os\nos.system('rm -rf /tmp/airlock-cli-test')\n"  # risk 10: step-up, two reviewers


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("cli") / "data"
    server = start_server(data_dir)
    server.data_dir = data_dir
    server.reviewer = user_token(data_dir, "reviewer")
    server.admin = user_token(data_dir, "admin")
    yield server
    server.stop()


class Terminal:
    """A person's shell: its own config directory, the ``airlock`` command."""

    def __init__(self, home: Path):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        self.env.update(XDG_CONFIG_HOME=str(home), COLUMNS="200", NO_COLOR="1")
        self.config = home / "airlock" / "config.json"

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120):
        return subprocess.run(
            [str(AIRLOCK), *args],
            input=stdin,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str, stdin: str | None = None) -> subprocess.Popen:
        process = subprocess.Popen(
            [str(AIRLOCK), *args],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if stdin is not None:
            process.stdin.write(stdin)
        process.stdin.close()
        process.stdin = None  # communicate() must not write to it again
        return process


@pytest.fixture
def terminal(tmp_path) -> Terminal:
    return Terminal(tmp_path / "home")


@pytest.fixture
def agent_shell(tmp_path, deployment) -> Terminal:
    shell = Terminal(tmp_path / "agent")
    assert shell("login", deployment.base, "--token", deployment.token).returncode == 0
    return shell


@pytest.fixture
def reviewer_shell(tmp_path, deployment) -> Terminal:
    shell = Terminal(tmp_path / "reviewer")
    assert (
        shell("login", deployment.base, "--token", "-", stdin=deployment.reviewer + "\n").returncode
        == 0
    )
    return shell


def one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("airlock: "), result.stderr
    return lines[0]


def wait_pending(deployment, reason: str) -> dict:
    """The proposal ``airlock run`` made, once it is in the queue."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, page = deployment.api(
            "GET", "/api/v1/proposals?status=pending&q=" + reason.replace(" ", "+")
        )
        if page["items"]:
            return page["items"][0]
        time.sleep(0.2)
    raise AssertionError(f"no pending proposal for {reason!r}")


def test_without_a_login_it_says_how_to_log_in(terminal):
    result = terminal("queue")
    assert result.returncode == 3
    assert one_line(result) == (
        "airlock: not logged in: run `airlock login URL` (or set AIRLOCK_URL and AIRLOCK_TOKEN)"
    )


def test_a_login_is_checked_and_kept_for_its_owner_only(terminal, deployment):
    refused = terminal("login", deployment.base, "--token", "alk_not-a-token")
    assert refused.returncode == 5 and "the token was refused" in one_line(refused)
    assert not terminal.config.exists()
    down = terminal("login", f"http://127.0.0.1:{free_port()}", "--token", deployment.token)
    assert down.returncode == 4 and "connection refused (is Airlock running there?)" in one_line(
        down
    )
    result = terminal("login", deployment.base, "--token", deployment.reviewer)
    assert result.returncode == 0, result.stderr
    assert "as reviewer (a reviewer)" in result.stdout
    assert stat.S_IMODE(terminal.config.stat().st_mode) == 0o600
    assert stat.S_IMODE(terminal.config.parent.stat().st_mode) == 0o700
    assert json.loads(terminal.config.read_text())["token"] == deployment.reviewer
    assert terminal("logout").stdout.strip() == "Logged out."
    assert terminal("queue").returncode == 3


def test_a_gated_step_runs_when_approved_streams_and_exits_with_its_code(
    agent_shell, reviewer_shell, deployment, tmp_path
):
    script = tmp_path / "step.py"
    script.write_text(
        MEDIUM
        + "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\nsys.exit(3)\n"
    )
    running = agent_shell.start("run", str(script), "--reason", "cli gated step")
    waiting = running.stderr.readline()  # said before anyone decides
    pending = wait_pending(deployment, "cli gated step")
    assert waiting.startswith(f"Proposal #{pending['id']} (risk {pending['risk']['score']}) waits")
    queue = reviewer_shell("queue")
    assert queue.returncode == 0
    rows = [line.split("│") for line in queue.stdout.splitlines() if line.startswith("│")]
    row = "│".join(next(cells for cells in rows if cells[1].strip() == str(pending["id"])))
    assert "script.execute" in row and "demo-agent" in row and "0 of 1" in row
    shown = reviewer_shell("show", str(pending["id"]))
    assert "print(os.getcwd())" in shown.stdout and "Why this risk" in shown.stdout
    approved = reviewer_shell("approve", str(pending["id"]), "-m", "fine from the terminal")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == f"Proposal #{pending['id']}: approved"
    out, err = running.communicate(timeout=120)
    assert running.returncode == 3, err
    assert out.splitlines()[-1] == "to stdout" and "/" in out.splitlines()[0]
    _, proposal = deployment.api("GET", f"/api/v1/proposals/{pending['id']}")
    execution = proposal["execution_id"]
    assert err.splitlines() == [
        f"Approved; execution #{execution}:",
        "to stderr",
        f"airlock: execution #{execution} failed",
    ]
    again = reviewer_shell("approve", str(pending["id"]))
    assert again.returncode == 8
    assert one_line(again) == f"airlock: proposal {pending['id']} is approved, not pending"
    assert proposal["decisions"][0]["comment"] == "fine from the terminal"


def test_a_rejected_step_exits_10_with_the_reviewers_reason(
    agent_shell, reviewer_shell, deployment
):
    running = agent_shell.start("run", "-", "--reason", "cli rejected step", stdin=MEDIUM)
    try:
        pending = wait_pending(deployment, "cli rejected step")
        rejected = reviewer_shell("reject", str(pending["id"]), "-m", "not on a Friday")
        assert rejected.returncode == 0, rejected.stderr
        _, err = running.communicate(timeout=60)
    finally:
        running.kill()
    assert running.returncode == 10
    assert f"airlock: proposal #{pending['id']} rejected: not on a Friday" in err


def test_json_output_is_for_scripts(agent_shell, reviewer_shell, deployment):
    _, made = deployment.api(
        "POST",
        "/api/v1/proposals",
        {
            "action": "script.execute",
            "parameters": {"language": "python", "code": MEDIUM},
            "reason": "cli json",
        },
    )
    page = json.loads(reviewer_shell("queue", "--json", "--search", "cli json").stdout)
    assert [item["id"] for item in page["items"]] == [made["id"]]
    shown = json.loads(reviewer_shell("show", str(made["id"]), "--json").stdout)
    assert shown["proposal"]["reason"] == "cli json" and shown["execution"] is None
    missing = reviewer_shell("show", "999999", "--json")
    assert missing.returncode == 7
    assert json.loads(missing.stdout)["error"]["type"] == "not_found"
    refused = agent_shell("approve", str(made["id"]), "--json")
    assert refused.returncode == 6
    assert json.loads(refused.stdout)["error"]["message"] == "agent tokens cannot approve or reject"


def test_bad_input_is_one_line_each(reviewer_shell):
    bad = reviewer_shell("queue", "--status", "waiting")
    assert bad.returncode == 1
    assert one_line(bad) == (
        "airlock: status: 'waiting' is not one of pending, approved, denied, rejected, expired, "
        "withdrawn"
    )
    usage = reviewer_shell("reject", "1")
    assert usage.returncode == 2 and "Missing option '-m'" in usage.stderr


def test_an_agent_withdraws_its_proposal_and_it_shows_as_withdrawn(
    agent_shell, reviewer_shell, deployment
):
    made = deployment.propose_script(MEDIUM, reason="cli withdrawn")
    assert made["status"] == "pending"
    withdrawn = agent_shell("withdraw", str(made["id"]), "--reason", "the release moved")
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert withdrawn.stdout.strip() == f"Proposal #{made['id']}: withdrawn: the release moved"
    again = agent_shell("withdraw", str(made["id"]), "--json")
    assert again.returncode == 8
    assert json.loads(again.stdout)["error"]["type"] == "conflict"
    assert one_line(again) == (
        f"airlock: proposal {made['id']} is withdrawn: only a pending one can be withdrawn"
    )
    theirs = reviewer_shell("withdraw", str(made["id"]))
    assert theirs.returncode == 7 and "does not exist or is not visible to you" in one_line(theirs)
    shown = reviewer_shell("show", str(made["id"]))
    assert f"Proposal #{made['id']}  WITHDRAWN  risk" in shown.stdout
    assert "Withdrawn by demo-agent at " in shown.stdout and ": the release moved" in shown.stdout
    listed = rows(reviewer_shell("queue", "--status", "withdrawn", "-q", "cli withdrawn"))
    assert listed[made["id"]][-1] == "withdrawn"  # where a pending one counts approvals


@pytest.fixture
def limited(deployment, tmp_path):
    """Shells of two agents: cli-queue may have one proposal pending, cli-paused is paused."""
    shells = {}
    for name in ("cli-queue", "cli-paused"):
        token = manage(
            deployment.data_dir, "create_agent", name, "--capability", "script.execute"
        ).split()[-1]
        shells[name] = Terminal(tmp_path / name)
        shells[name].token = token
        assert shells[name]("login", deployment.base, "--token", token).returncode == 0
    policy = "from tests.conftest import use_policy; use_policy({})"
    overrides = {"cli-queue": {"max_pending": 1}}
    manage(deployment.data_dir, "shell", "-c", policy.format(f"agent_overrides={overrides!r}"))
    manage(deployment.data_dir, "agents", "pause", "cli-paused", "--reason", "runaway loop")
    yield shells
    manage(deployment.data_dir, "shell", "-c", policy.format(""))


def test_run_waits_out_a_full_queue_and_a_paused_agent_exits_13_at_once(
    limited, deployment, tmp_path
):
    shell = limited["cli-queue"]
    status, first = deployment.api(
        "POST",
        "/api/v1/proposals",
        {"action": "script.execute", "parameters": {"language": "python", "code": MEDIUM}},
        token=shell.token,
    )
    assert status == 201 and first["status"] == "pending", first
    # The Retry-After of a full queue: until the agent's first pending proposal ends.
    soon = (
        "from datetime import timedelta; from django.utils import timezone; "
        f"from approvals.models import Proposal; Proposal.objects.filter(pk={first['id']})"
        ".update(expires_at=timezone.now() + timedelta(seconds=4))"
    )
    manage(deployment.data_dir, "shell", "-c", soon)
    running = shell.start("run", "-", "--reason", "cli after a full queue", stdin="print('ran')")
    try:
        said = running.stderr.readline()
        assert said.startswith("rate limited: retrying in "), said
        assert "max_pending 1" in said
        freed = shell("withdraw", str(first["id"]), "--reason", "superseded")
        assert freed.returncode == 0, freed.stderr
        out, err = running.communicate(timeout=60)
    finally:
        running.kill()
    assert running.returncode == 0, err
    assert out == "ran\n" and "Approved; execution #" in err

    started = time.monotonic()
    paused = limited["cli-paused"]("run", "-", stdin="print('never')")
    assert time.monotonic() - started < 10
    assert paused.returncode == 13
    assert "rate limited" not in paused.stderr
    line = one_line(paused)
    assert line.startswith("airlock: agent cli-paused is paused since ")
    assert line.endswith("(runaway loop); an admin must resume it")


def test_a_high_risk_decision_asks_for_a_second_factor_in_the_browser(reviewer_shell, deployment):
    _, made = deployment.api(
        "POST",
        "/api/v1/proposals",
        {"action": "script.execute", "parameters": {"language": "python", "code": HIGH}},
    )
    assert made["risk"]["score"] >= 7
    result = reviewer_shell("approve", str(made["id"]), "--step-up-timeout", "1")
    assert result.returncode == 9
    assert (
        f"Finish in the browser: {deployment.base}/proposals/{made['id']}/approve/" in result.stderr
    )
    assert "airlock: not decided in time" in result.stderr
    _, after = deployment.api("GET", f"/api/v1/proposals/{made['id']}")
    assert after["status"] == "pending" and after["approvals"] == 0


def test_watch_streams_an_execution_resumes_after_a_chunk_and_mirrors_its_exit_code(
    reviewer_shell, deployment
):
    code = "import sys, time\nfor i in range(5):\n    print(f'line {i}', flush=True)\n    time.sleep(0.2)\nsys.exit(7)\n"
    _, made = deployment.api(
        "POST",
        "/api/v1/proposals",
        {"action": "script.execute", "parameters": {"language": "python", "code": code}},
    )
    assert made["status"] == "approved", made
    watched = reviewer_shell("watch", str(made["execution_id"]))
    assert watched.returncode == 7, watched.stderr
    assert watched.stdout.splitlines() == [f"line {i}" for i in range(5)]
    lines = reviewer_shell("watch", str(made["execution_id"]), "--json")
    chunks = [json.loads(line) for line in lines.stdout.splitlines() if line.startswith('{"type"')]
    last = chunks[-1]["seq"]
    resumed = reviewer_shell("watch", str(made["execution_id"]), "--after", str(last - 1))
    assert resumed.stdout == chunks[-1]["data"]
    missing = reviewer_shell("watch", "999999")
    assert missing.returncode == 7


def test_a_revoked_token_and_a_server_that_is_down(reviewer_shell, deployment, tmp_path):
    shell = Terminal(tmp_path / "revoked")
    token = user_token(deployment.data_dir, "reviewer2")
    assert shell("login", deployment.base, "--token", token).returncode == 0
    manage(
        deployment.data_dir,
        "shell",
        "-c",
        "from approvals.models import UserToken; from django.utils import timezone; "
        "UserToken.objects.filter(user__username='reviewer2').update(revoked_at=timezone.now())",
    )
    revoked = shell("queue")
    assert revoked.returncode == 5
    assert one_line(revoked).startswith("airlock: the token was refused")
    assert f"log in again with `airlock login {deployment.base}`" in revoked.stderr
    shell.env["AIRLOCK_URL"] = f"http://127.0.0.1:{free_port()}"
    down = shell("queue")
    assert down.returncode == 4 and "connection refused" in one_line(down)


def test_policy_from_the_terminal(reviewer_shell, deployment, tmp_path):
    exported = reviewer_shell("policy", "export")
    assert exported.returncode == 0 and "auto_approve_below:" in exported.stdout
    draft = tmp_path / "policy.yaml"
    draft.write_text(exported.stdout.replace("auto_approve_below: 4", "auto_approve_below: 7"))
    simulated = reviewer_shell("policy", "simulate", str(draft))
    assert simulated.returncode == 0, simulated.stderr
    assert "change: auto_approve_below: 4 → 7" in simulated.stdout
    assert "proposals would move" in simulated.stdout
    denied = reviewer_shell("policy", "apply", str(draft))
    assert (
        denied.returncode == 6 and one_line(denied) == "airlock: only admins can change the policy"
    )
    admin = Terminal(tmp_path / "admin")
    admin("login", deployment.base, "--token", deployment.admin)
    applied = admin("policy", "apply", str(draft), "--step-up-timeout", "0")
    assert applied.returncode == 9
    assert "/manage/policy/apply/?draft=" in applied.stderr


# A review route: tool calls on databases need one approval from dba, whose only member is
# the demo reviewer; reviewer2 is a reviewer in no team.
ROUTED = {
    "teams": {"dba": {"members": ["reviewer"]}},
    "reviews": [{"match": ["tool:db.*"], "require": {"dba": 1}}],
}


@pytest.fixture
def routed(deployment):
    """A pending tool call that the route above holds for dba, under that policy (and the
    default policy again afterwards)."""
    manage(
        deployment.data_dir,
        "shell",
        "-c",
        f"from tests.conftest import use_policy; use_policy(**{ROUTED!r})",
    )
    status, made = deployment.api(
        "POST",
        "/api/v1/proposals",
        {
            "action": "tool.call",
            "parameters": {"tool": "db.migrate", "arguments": {"to": "0042"}},
            "reason": "cli routed",
        },
    )
    assert status == 201 and made["status"] == "pending", made
    yield made
    manage(
        deployment.data_dir, "shell", "-c", "from tests.conftest import use_policy; use_policy()"
    )


@pytest.fixture
def outside_shell(tmp_path, deployment) -> Terminal:
    """reviewer2: a reviewer, in none of the route's teams."""
    shell = Terminal(tmp_path / "outside")
    token = user_token(deployment.data_dir, "reviewer2")
    assert shell("login", deployment.base, "--token", token).returncode == 0
    return shell


def rows(result) -> dict[int, list[str]]:
    """A table's rows by proposal id, each as its cells."""
    assert result.returncode == 0, result.stderr
    found = {}
    for line in result.stdout.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells and cells[0].isdigit():
            found[int(cells[0])] = cells
    return found


def test_queue_mine_lists_a_routed_proposal_for_its_team_only_with_what_each_team_owes(
    reviewer_shell, outside_shell, routed, deployment
):
    free = deployment.propose_script(MEDIUM, reason="cli unrouted")  # any reviewer's
    mine = reviewer_shell("queue", "--mine")
    assert mine.stdout.startswith("Waiting for you — ")
    listed = rows(mine)
    _, _, action, summary, agent, _, approvals, teams = listed[routed["id"]]
    assert (action, summary, agent) == ("tool.call", 'db.migrate(to="0042")', "demo-agent")
    assert (approvals, teams) == ("0 of 1", "dba 0/1")
    assert listed[free["id"]][-2:] == ["0 of 1", ""]  # no route: no team owes it
    theirs = rows(outside_shell("queue", "--mine"))
    assert routed["id"] not in theirs and free["id"] in theirs
    assert rows(outside_shell("queue"))[routed["id"]][-1] == "dba 0/1"  # the whole queue has it
    shown = outside_shell("show", str(routed["id"]))
    assert "Teams: dba 0/1 (reviews[1]: tool:db.*)\n  • dba 0/1: may decide: reviewer\n" in (
        shown.stdout
    )
    approved = reviewer_shell("approve", str(routed["id"]))
    assert approved.stdout.strip() == f"Proposal #{routed['id']}: approved"
    assert routed["id"] not in rows(reviewer_shell("queue", "--mine"))
    shown = reviewer_shell("show", str(routed["id"]))
    assert "  • dba 1/1: approved by reviewer\n" in shown.stdout


def test_deciding_outside_the_route_says_who_may(outside_shell, routed):
    needs = "needs 1 approval from dba (reviewer)"
    approve = outside_shell("approve", str(routed["id"]))
    assert approve.returncode == 6
    assert one_line(approve) == (
        f"airlock: you are not a required reviewer of proposal #{routed['id']}: it {needs}"
    )
    reject = outside_shell("reject", str(routed["id"]), "-m", "no")
    assert reject.returncode == 6 and one_line(reject) == one_line(approve)
    as_json = outside_shell("approve", str(routed["id"]), "--json")
    assert as_json.returncode == 6
    assert json.loads(as_json.stdout)["error"] == {
        "type": "not_a_required_reviewer",
        "message": needs,
    }


def test_queue_mine_is_the_pending_queue_of_a_reviewer(agent_shell, reviewer_shell):
    agent = agent_shell("queue", "--mine")
    assert agent.returncode == 1
    assert (
        one_line(agent) == "airlock: review_requested: is for reviewers: an agent reviews nothing"
    )
    history = reviewer_shell("queue", "--mine", "--status", "all")
    assert history.returncode == 2 and "--mine lists pending proposals only" in history.stderr


class CuttingProxy:
    """A TCP proxy in front of the server that cuts the first websocket once it has carried
    ``cut_after`` bytes towards the client: a connection dropped mid-stream."""

    def __init__(self, upstream_port: int, cut_after: int):
        self.upstream_port, self.cut_after = upstream_port, cut_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cuts = 0
        self.websockets = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        first = client.recv(65536)
        websocket = first.startswith(b"GET /ws/")
        if websocket:
            self.websockets += 1
        cut = websocket and self.cuts == 0
        if cut:
            self.cuts += 1
        upstream.sendall(first)

        def pump(source, sink, limit=None):
            carried = 0
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
                    carried += len(data)
                    if limit is not None and carried >= limit:
                        break
            except OSError:
                pass
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        pump(upstream, client, self.cut_after if cut else None)

    def close(self) -> None:
        self.listener.close()


def test_watch_resumes_after_a_dropped_connection_without_a_gap_or_a_repeat(
    reviewer_shell, deployment
):
    code = "import time\nfor i in range(12):\n    print(f'line {i}', flush=True)\n    time.sleep(0.25)\n"
    _, made = deployment.api(
        "POST",
        "/api/v1/proposals",
        {"action": "script.execute", "parameters": {"language": "python", "code": code}},
    )
    assert made["status"] == "approved", made
    proxy = CuttingProxy(int(deployment.base.rsplit(":", 1)[1]), cut_after=400)
    try:
        reviewer_shell.env["AIRLOCK_URL"] = f"http://127.0.0.1:{proxy.port}"
        watched = reviewer_shell("watch", str(made["execution_id"]))
    finally:
        proxy.close()
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.splitlines() == [f"line {i}" for i in range(12)]
    assert proxy.cuts == 1 and proxy.websockets >= 2  # cut once, and opened again


def test_an_admin_verifies_and_exports_the_audit_trail_and_sees_tampering(
    deployment, reviewer_shell, tmp_path
):
    """Last in the module: it breaks the deployment's chain on purpose."""
    admin = Terminal(tmp_path / "admin")
    admin("login", deployment.base, "--token", deployment.admin)
    verified = admin("audit", "verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("Audit chain intact: ")
    exported = tmp_path / "audit.jsonl"
    assert admin("audit", "export", "-o", str(exported)).returncode == 0
    events = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert "user_token.created" in {e["verb"] for e in events}
    refused = reviewer_shell("audit", "verify")
    assert refused.returncode == 6
    manage(
        deployment.data_dir,
        "shell",
        "-c",
        "from audit.models import AuditEvent; "
        "AuditEvent.objects.filter(seq=3).update(actor='user:mallory')",
    )
    broken = admin("audit", "verify")
    assert broken.returncode == 12
    assert one_line(broken) == (
        "airlock: the audit chain is broken at row 3: row 3 was edited (2 rows before it are sound)"
    )
