"""Airlock as most people run it: ``serve`` as an ordinary user, from their own clone.

The deployment runs as a non-root user (``scripts/unprivileged``) from a copy
of the checkout that user owns, with its default data dir (``var/`` inside
it) and ``SANDBOX_BACKEND=auto``, on a host without bubblewrap (hidden in a
private mount namespace). Every control-plane case goes through the API as
an agent's proposal, is approved (by policy or by reviewers), runs, and
fails to reach anything; then the host is checked.

A second deployment runs on a host whose kernel also refuses user namespaces
and has no Landlock (``tests/legacy_host.py``): there the isolation is weak,
``serve`` says so, and no script runs on policy alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executions.attacks import (
    assert_contained,
    attack,
    database_steps,
    marker,
    port_steps,
    worker_steps,
)
from tests.serving import ROOT, USER_PYTHON, Server, start_server
from tests.support import port_open, require

UNPRIVILEGED = [str(ROOT / "scripts" / "unprivileged"), "--hide", "bwrap", "--"]
LEGACY_HOST = [USER_PYTHON, str(ROOT / "tests" / "legacy_host.py")]
USER = "airlock-user"
TERMINAL = ("succeeded", "failed", "timed_out", "cancelled", "lost")


@pytest.fixture(scope="module")
def user_checkout() -> Iterator[Path]:
    """A copy of this checkout owned by the unprivileged user, in its home."""
    require(os.geteuid() == 0, "acting as another user needs root")
    subprocess.run([*UNPRIVILEGED, "true"], check=True)  # creates the user if missing
    home = Path(os.path.expanduser(f"~{USER}"))
    copy = home / f"airlock-{uuid.uuid4().hex[:8]}"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (item.decode() for item in listed)):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(copy)], check=True)
    yield copy
    shutil.rmtree(copy, ignore_errors=True)


def manage(checkout: Path, *args: str, wrapper: list[str], data_dir: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_DATA_DIR"}
    if data_dir != checkout / "var":
        env["AIRLOCK_DATA_DIR"] = str(data_dir)
    done = subprocess.run(
        [*wrapper, USER_PYTHON, str(checkout / "manage.py"), *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Deployment:
    """A running ``serve`` and the reviewers' tokens."""

    def __init__(
        self, server: Server, checkout: Path, wrapper: list[str], secret: str, data_dir: Path
    ):
        self.server, self.checkout, self.secret = server, checkout, secret
        self.data_dir = data_dir
        self.reviewers = [
            manage(checkout, "create_user_token", name, wrapper=wrapper, data_dir=data_dir)
            for name in ("reviewer", "reviewer2")
        ]

    def health(self) -> dict:
        return self.server.api("GET", "/healthz")[1]

    def propose(self, code: str, approve: bool = True) -> dict:
        """Propose ``code``; reviewers approve it if it waits."""
        proposal = self.server.propose_script(code, reason="control-plane probe")
        if proposal["status"] == "pending" and approve:
            for token in self.reviewers[: proposal["required_approvals"]]:
                status, body = self.server.api(
                    "POST", f"/api/v1/proposals/{proposal['id']}/approve", {}, token=token
                )
                assert status == 200, body
        return proposal

    def run_script(self, code: str, approve: bool = True) -> tuple[dict, dict]:
        """Propose ``code``, approve it if it waits, wait for the end: (proposal, execution)."""
        proposal = first = self.propose(code, approve)
        deadline = time.monotonic() + 90
        while proposal.get("execution_status") not in TERMINAL and time.monotonic() < deadline:
            if proposal["status"] in ("denied", "rejected", "expired"):
                raise AssertionError(proposal)
            if proposal["status"] == "pending" and not approve:
                return first, {}
            _, proposal = self.server.api("GET", f"/api/v1/proposals/{proposal['id']}?wait=20")
        _, execution = self.server.api("GET", f"/api/v1/executions/{proposal['execution_id']}")
        assert execution["status"] in TERMINAL, execution
        return first, execution


@pytest.fixture(scope="module")
def deployment(user_checkout) -> Iterator[Deployment]:
    secret = marker()
    server = start_server(
        None,
        backend="auto",
        wrapper=UNPRIVILEGED,
        checkout=user_checkout,
        # Reviewers approve the probes with their tokens: step-up is off for decisions.
        extra_env={"AIRLOCK_PROBE_SECRET": secret, "STEP_UP_MIN_RISK": "11"},
        python=USER_PYTHON,
    )
    try:
        yield Deployment(server, user_checkout, UNPRIVILEGED, secret, user_checkout / "var")
    finally:
        server.stop()


def test_it_runs_as_the_user_and_reports_namespaces_without_bubblewrap(deployment):
    server = deployment.server
    status = Path(f"/proc/{server.children()[0]}/status").read_text()
    uid = subprocess.run(["id", "-u", USER], capture_output=True, text=True).stdout.strip()
    assert f"\nUid:\t{uid}\t" in status
    sandbox = deployment.health()["checks"]["sandbox"]
    assert (sandbox["backend"], sandbox["isolation"]) == ("local", "namespaces"), sandbox
    assert "bubblewrap" in sandbox["reason"] and not sandbox["warning"]
    _, capabilities = server.api("GET", "/api/v1/capabilities")
    assert capabilities["sandbox"]["isolation"] == "namespaces"
    assert "Sandbox: local · isolation namespaces" in server.log.read_text()


def test_the_data_dir_and_secret_key_are_the_users_alone(deployment):
    assert deployment.data_dir.stat().st_mode & 0o777 == 0o700
    for name in ("secret_key", "airlock.sqlite3"):
        assert (deployment.data_dir / name).stat().st_mode & 0o777 == 0o600, name


def test_every_control_plane_reach_fails_through_the_api(deployment):
    require(port_open("127.0.0.1", 5432), "PostgreSQL is not running on 127.0.0.1:5432")
    require(port_open("127.0.0.1", 6379), "Redis is not running on 127.0.0.1:6379")
    server, data_dir, checkout = deployment.server, deployment.data_dir, deployment.checkout
    tag = marker()
    workers = server.children()
    port = int(server.base.rsplit(":", 1)[1])
    home = checkout.parent
    database = str(data_dir / "airlock.sqlite3")
    writes = [str(place / tag) for place in (data_dir, data_dir / "broker", checkout, home)]
    writes.append(f"/var/tmp/{tag}")
    sockets = ["/var/run/postgresql/.s.PGSQL.5432"]
    cases = {
        "database": database_steps(database),
        "data dir": [("list the data dir", f"os.listdir({str(data_dir)!r})")]
        + [("list the broker folder", f"os.listdir({str(data_dir / 'broker')!r})")],
        "secret key": [("read the secret key", f"read({str(data_dir / 'secret_key')!r})")],
        "checkout": [("read settings.py", f"read({str(checkout / 'console/settings.py')!r})")],
        "ports": port_steps(
            [("127.0.0.1", port), ("127.0.0.1", 6379), ("127.0.0.1", 5432)], sockets
        ),
        "worker": [step for pid in workers for step in worker_steps(pid)]
        + [("signal every process", "os.kill(-1, signal.SIGKILL)")],
        "host places": [(f"write {path}", f"write({path!r})") for path in writes],
        "process list": [("find serve", "processes_with('manage.py') or 1/0")],
        "home": [("list the home", f"os.listdir({str(home)!r})")],
    }
    decisions = {}
    for name, steps in cases.items():
        proposal, execution = deployment.run_script(attack(steps))
        decisions[name] = (proposal["status"], proposal["decision_path"]["step"])
        assert execution["status"] == "succeeded", (name, execution)
        assert_contained(execution["stdout"], deployment.secret)
    private = [f"/tmp/{tag}", f"/dev/shm/{tag}"]
    assert_private_tmp_stays_private(deployment, private)
    # The next run finds nothing any of them left behind.
    leftovers = [(path, f"read({path!r})") for path in writes + private]
    _, execution = deployment.run_script(attack(leftovers))
    assert_contained(execution["stdout"])
    # And on the host: nothing written, the database as it was, the workers alive.
    assert [path for path in writes + private if os.path.exists(path)] == []
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        tables = {row[0] for row in db.execute("select name from sqlite_master")}
    assert "hijacked" not in tables and "approvals_proposal" in tables
    assert set(workers) <= set(server.children()), "a serve process was killed"
    # Namespaces are strong isolation: policy decided as it would anywhere.
    assert not [name for name, (_, step) in decisions.items() if step == "weak_sandbox"]


def assert_private_tmp_stays_private(deployment: Deployment, paths: list[str]) -> None:
    """A run may write its own /tmp and /dev/shm; while it runs, the host's show nothing."""
    server = deployment.server
    code = "".join(f"open({path!r}, 'w').write('x')\n" for path in paths)
    code += "print('written', flush=True)\nimport time\ntime.sleep(5)\n"
    proposal = deployment.propose(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, proposal = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
        if proposal.get("execution_id"):
            _, page = server.api("GET", f"/api/v1/executions/{proposal['execution_id']}/output")
            if "written" in "".join(chunk["data"] for chunk in page["chunks"]):
                break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the probe never wrote: {proposal}")
    on_host = [path for path in paths if os.path.exists(path)]
    _, execution = server.api("GET", f"/api/v1/executions/{proposal['execution_id']}")
    assert on_host == [], (on_host, execution)
    assert execution["status"] == "running", execution  # checked while the run was alive


@pytest.fixture(scope="module")
def legacy_deployment(user_checkout) -> Iterator[Deployment]:
    wrapper = [*UNPRIVILEGED, *LEGACY_HOST]
    data_dir = user_checkout / "var-legacy"  # a deployment of its own, beside the other
    server = start_server(
        None,
        backend="auto",
        wrapper=wrapper,
        checkout=user_checkout,
        extra_env={"AIRLOCK_DATA_DIR": str(data_dir)},
        python=USER_PYTHON,
    )
    try:
        yield Deployment(server, user_checkout, wrapper, marker(), data_dir)
    finally:
        server.stop()


def test_on_a_host_without_namespaces_or_landlock_serve_says_weak(legacy_deployment):
    sandbox = legacy_deployment.health()["checks"]["sandbox"]
    assert (sandbox["backend"], sandbox["isolation"]) == ("local", "weak"), sandbox
    assert "no namespaces, no Landlock" in sandbox["reason"]
    assert "policy alone approves none" in sandbox["warning"]
    log = legacy_deployment.server.log.read_text()
    assert "isolation weak" in log and "WARNING: weak isolation" in log


def test_on_a_weak_host_no_script_runs_on_policy_alone(legacy_deployment):
    proposal, _ = legacy_deployment.run_script("print(1)", approve=False)
    assert proposal["status"] == "pending", proposal
    assert proposal["decision_path"]["step"] == "weak_sandbox"
    assert "weak isolation" in proposal["decision_path"]["reason"]
    assert proposal["risk"]["score"] < 4  # policy alone would have run it
    # A person may still approve it, and it runs in the weak sandbox.
    proposal, execution = legacy_deployment.run_script("print(1)")
    assert execution["status"] == "succeeded" and execution["stdout"] == "1\n"
    assert execution["backend"] == "local"
