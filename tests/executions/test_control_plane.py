"""The control plane is out of reach: every case is code a policy approved, trying, and failing.

A run must not reach what Airlock itself runs on: its database, data dir,
broker folder and secret key, its checkout, the loopback ports of the console,
Redis and PostgreSQL, the worker's environment and signals, other runs' files
and processes, the host's /tmp and homes, the host's process list, and
nothing it leaves may reach the next run. This module builds a real stand-in
of that control plane owned by the user the tests run as (a data dir with a
SQLite database, a broker folder and a 0600 secret key; a checkout; a
"worker" process with the secrets in its environment; a console port), then
attacks it from every sandbox configuration of this host.

``scripts/test`` runs it as root and again as an ordinary user with
bubblewrap hidden (``scripts/unprivileged``): the claim holds for both. The
weak fallback (local with rlimits only) is not contained by definition; what
it cannot contain is listed in ``LIMITATIONS`` as strict xfails, and policy
never approves a script into it on its own (tests/approvals/test_cascade.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from executions.sandboxes.base import Sandbox
from tests.executions.attacks import (
    assert_contained,
    assert_next_run_is_clean,
    attack,
    database_steps,
    host_processes_with,
    marker,
    port_steps,
    run,
    start_in_background,
    wait_for_output,
    with_limitations,
    worker_steps,
)
from tests.support import port_open, require, wait_for

ROOT = os.geteuid() == 0
WEAK = "local with rlimits only: no namespaces, no Landlock"
CHECKOUT = Path(settings.BASE_DIR)
POSTGRES_SOCKET = "/var/run/postgresql/.s.PGSQL.5432"

# (configuration, test name) -> why the weak fallback cannot contain it.
LIMITATIONS: dict[tuple[str, str], str] = {
    ("local-rlimits", "test_the_checkout_is_out_of_reach"): f"{WEAK}: the checkout is readable",
    ("local-rlimits", "test_control_plane_ports_are_out_of_reach"): f"{WEAK}: host network",
    ("local-rlimits", "test_the_host_process_list_is_hidden"): f"{WEAK}: the host's /proc",
    ("local-rlimits", "test_the_worker_environment_is_out_of_reach"): (
        f"{WEAK}: the worker's command line shows in the host's /proc"
    ),
    ("local-rlimits", "test_another_runs_files_and_processes_are_out_of_reach"): (
        f"{WEAK}: other runs show in the host's /proc"
    ),
    ("local-rlimits", "test_nothing_reaches_the_host_tmp_home_or_data_dir"): (
        f"{WEAK}: the host's /tmp is shared"
    ),
}
if not ROOT:
    for _name in (
        "test_the_database_is_out_of_reach",
        "test_the_data_dir_and_broker_folder_are_out_of_reach",
        "test_the_secret_key_is_out_of_reach",
        "test_the_worker_cannot_be_signalled",
        "test_no_state_survives_to_the_next_run",
    ):
        LIMITATIONS[("local-rlimits", _name)] = f"{WEAK}, and runs share the worker's uid"


@dataclass
class ControlPlane:
    """A stand-in of what Airlock runs on, owned by the user the tests run as."""

    data_dir: Path
    database: Path
    broker: Path
    secret_file: Path
    secret: str
    checkout: Path  # a checkout this user owns: Airlock's own code, writable by the server
    home: Path
    worker_pid: int  # a "worker" with the secrets in its environment
    worker_marker: str
    console_port: int


@pytest.fixture
def control_plane() -> Iterator[ControlPlane]:
    """A fresh one per test: what the weak configuration breaks must not spill over."""
    secret = marker()
    with tempfile.TemporaryDirectory(prefix="airlock-control-plane-") as base:
        data_dir = Path(base) / "var"
        data_dir.mkdir(mode=0o700)
        database = data_dir / "airlock.sqlite3"
        with contextlib.closing(sqlite3.connect(database)) as db:
            db.execute("create table policy (version integer, data text)")
            db.execute("insert into policy values (1, ?)", (secret,))
            db.commit()
        database.chmod(0o600)
        broker = data_dir / "broker"
        broker.mkdir(mode=0o700)
        (broker / "message.msg").write_text(secret)
        secret_file = data_dir / "secret_key"
        secret_file.write_text(secret)
        secret_file.chmod(0o600)
        checkout = Path(base) / "checkout"
        (checkout / "console").mkdir(parents=True)
        (checkout / "console" / "settings.py").write_text(f"SECRET_KEY = {secret!r}\n")
        worker_marker = marker()
        env = {"SECRET_KEY": secret, "DATABASE_URL": f"postgres://airlock:{secret}@db/airlock"}
        worker = subprocess.Popen(
            [worker_marker, "600"], executable="/bin/sleep", env={**os.environ, **env}
        )
        console = socket.socket()
        console.bind(("127.0.0.1", 0))
        console.listen(16)
        try:
            yield ControlPlane(
                data_dir=data_dir,
                database=database,
                broker=broker,
                secret_file=secret_file,
                secret=secret,
                checkout=checkout,
                home=Path.home(),
                worker_pid=worker.pid,
                worker_marker=worker_marker,
                console_port=console.getsockname()[1],
            )
        finally:
            console.close()
            worker.kill()
            worker.wait()


@pytest.fixture
def sandbox(any_sandbox, request) -> Sandbox:
    return with_limitations(*any_sandbox, request, LIMITATIONS)


def attempt(sandbox: Sandbox, code: str) -> str:
    """Run attack code; return what it printed (``REACHED ...`` for every success)."""
    outcome, sink = run(sandbox, code, timeout_seconds=20)
    assert "tried" in sink.stdout, (outcome, sink.stdout, sink.stderr[-2000:])
    return sink.stdout


# --- Airlock's own state ----------------------------------------------------------------


def test_the_database_is_out_of_reach(sandbox, control_plane):
    path = str(control_plane.database)
    output = attempt(sandbox, attack(database_steps(path)))
    assert_contained(output, control_plane.secret)
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [row[0] for row in db.execute("select name from sqlite_master")]
        assert tables == ["policy"], tables
        assert db.execute("select data from policy").fetchall() == [(control_plane.secret,)]
    assert_next_run_is_clean(sandbox)


def test_the_data_dir_and_broker_folder_are_out_of_reach(sandbox, control_plane):
    tag = marker()
    data_dir, broker = str(control_plane.data_dir), str(control_plane.broker)
    steps = [
        ("list the data dir", f"os.listdir({data_dir!r})"),
        ("list the broker folder", f"os.listdir({broker!r})"),
        ("read a broker message", f"read({broker + '/message.msg'!r})"),
        ("write into the data dir", f"write({data_dir + '/' + tag!r})"),
        ("queue a broker message", f"write({broker + '/' + tag + '.msg'!r})"),
    ]
    assert_contained(attempt(sandbox, attack(steps)), control_plane.secret)
    assert sorted(os.listdir(data_dir)) == ["airlock.sqlite3", "broker", "secret_key"]
    assert os.listdir(broker) == ["message.msg"]
    assert_next_run_is_clean(sandbox)


def test_the_secret_key_is_out_of_reach(sandbox, control_plane):
    steps = [("read the secret key", f"read({str(control_plane.secret_file)!r})")]
    assert_contained(attempt(sandbox, attack(steps)), control_plane.secret)
    assert_next_run_is_clean(sandbox)


def test_the_checkout_is_out_of_reach(sandbox, control_plane):
    tag = marker()
    own = str(control_plane.checkout)
    steps = [
        ("read console/settings.py", f"read({str(CHECKOUT / 'console' / 'settings.py')!r})"),
        ("list the checkout", f"os.listdir({str(CHECKOUT)!r})"),
        ("read the server-owned checkout", f"read({own + '/console/settings.py'!r})"),
        ("write the server-owned checkout", f"write({own + '/console/' + tag + '.py'!r})"),
        ("write the checkout", f"write({str(CHECKOUT / (tag + '.py'))!r})"),
    ]
    assert_contained(attempt(sandbox, attack(steps)), control_plane.secret)
    assert not list(control_plane.checkout.rglob(f"{tag}*"))
    assert not (CHECKOUT / f"{tag}.py").exists()
    assert_next_run_is_clean(sandbox)


# --- the network the control plane listens on --------------------------------------------


def test_control_plane_ports_are_out_of_reach(sandbox, control_plane):
    require(port_open("127.0.0.1", 5432), "PostgreSQL is not running on 127.0.0.1:5432")
    require(port_open("127.0.0.1", 6379), "Redis is not running on 127.0.0.1:6379")
    targets = [("127.0.0.1", control_plane.console_port), ("127.0.0.1", 6379)]
    targets += [("127.0.0.1", 5432), ("localhost", 5432), ("::1", 6379)]
    for host, port in targets[:3]:
        assert port_open(host, port), f"the test itself cannot reach {host}:{port}"
    sockets = [POSTGRES_SOCKET] if os.path.exists(POSTGRES_SOCKET) else []
    assert_contained(attempt(sandbox, attack(port_steps(targets, sockets))))
    assert_next_run_is_clean(sandbox)


# --- the worker ---------------------------------------------------------------------------


def test_the_worker_environment_is_out_of_reach(sandbox, control_plane):
    steps = worker_steps(control_plane.worker_pid)[:2]
    output = attempt(sandbox, attack(steps, then="print(sorted(os.environ.items()))\n"))
    assert_contained(output, control_plane.secret, control_plane.worker_marker)
    assert "SECRET_KEY" not in output and "DATABASE_URL" not in output
    assert_next_run_is_clean(sandbox)


def test_the_worker_cannot_be_signalled(sandbox, any_sandbox, control_plane):
    pid = control_plane.worker_pid
    steps = worker_steps(pid)[2:]
    if any_sandbox[0] != "local-rlimits" or ROOT:
        # Everything this uid may signal (as the worker's own uid, this test run too);
        # whether it "worked" shows on the host: the worker must still be there.
        steps.append(("signal every process", "os.kill(-1, signal.SIGKILL)"))
    output = attempt(sandbox, attack(steps))
    assert "REACHED stop the worker" not in output, output
    assert host_processes_with(control_plane.worker_marker) == [pid]
    assert_next_run_is_clean(sandbox)


def test_the_host_process_list_is_hidden(sandbox, control_plane):
    then = (
        "pids = [p for p in listing('/proc') if p.isdigit()]\n"
        "if len(pids) > 20:\n"
        "    print('REACHED the host process list:', len(pids), 'processes')\n"
    )
    steps = [("find the worker", f"processes_with({control_plane.worker_marker!r}) or 1/0")]
    output = attempt(sandbox, attack(steps, then=then))
    assert_contained(output, control_plane.worker_marker)
    assert_next_run_is_clean(sandbox)


# --- the host's shared places, and other runs -------------------------------------------------


def test_nothing_reaches_the_host_tmp_home_or_data_dir(sandbox, control_plane):
    tag = marker()
    places = ["/tmp", "/var/tmp", "/dev/shm", str(control_plane.home)]
    places += [str(control_plane.data_dir), str(control_plane.checkout)]
    paths = [os.path.join(place, tag) for place in places]
    steps = [(f"write {path}", f"write({path!r})") for path in paths]
    code = attack(steps, then="print('written', flush=True)\nimport time\ntime.sleep(30)\n")
    thread, sink, cancel, _ = start_in_background(sandbox, code, timeout_seconds=40)
    try:
        wait_for_output(sink, "written")
        # While the run is alive: a private /tmp may hold the file, the host's must not.
        on_host = [path for path in paths if os.path.exists(path)]
    finally:
        cancel.set()
        thread.join(15)
    assert on_host == [], (on_host, sink.stdout)
    assert not [path for path in paths if os.path.exists(path)]
    assert_next_run_is_clean(sandbox, paths=paths)


def test_no_state_survives_to_the_next_run(sandbox, control_plane):
    tag = marker()
    places = ["/tmp", "/var/tmp", "/dev/shm", ".", "~", str(control_plane.home)]
    paths = [os.path.join(place, tag) for place in places]
    leave = [(f"leave {path}", f"write(os.path.expanduser({path!r}))") for path in paths]
    output = attempt(sandbox, attack(leave))
    assert f"REACHED leave ./{tag}" in output, output  # the run's own dir is writable
    find = [(f"a file of the last run: {p}", f"read(os.path.expanduser({p!r}))") for p in paths]
    assert_contained(attempt(sandbox, attack(find)))


VICTIM = """
import os
with open("secret.txt", "w") as f:
    f.write("{secret}")
print("ready", flush=True)
os.execv("/bin/sleep", ["{marker}", "30"])
"""


def test_another_runs_files_and_processes_are_out_of_reach(sandbox, control_plane):
    secret, tag = marker(), marker()
    thread, victim, cancel, ended = start_in_background(
        sandbox, VICTIM.format(secret=secret, marker=tag), timeout_seconds=40
    )
    try:
        wait_for_output(victim, "ready")
        # The other run's host pid, where the host sees it (gVisor's processes it does not).
        with contextlib.suppress(AssertionError):
            wait_for(lambda: host_processes_with(tag), timeout=3)
        pids = host_processes_with(tag)
        steps = [("find the other run", f"processes_with({tag!r}) or 1/0")]
        steps += [(f"list its files ({pid})", f"os.listdir('/proc/{pid}/cwd')") for pid in pids]
        steps += [(f"stop it ({pid})", f"os.kill({pid}, signal.SIGKILL)") for pid in pids]
        hunt = (
            "import glob\n"
            "for path in glob.glob('/tmp/*/*/secret.txt') + glob.glob('/tmp/*/secret.txt'):\n"
            "    step('read ' + path, lambda: read(path))\n"
        )
        output = attempt(sandbox, attack(steps, then=hunt))
        alive = not ended and host_processes_with(tag) == pids
    finally:
        cancel.set()
        thread.join(15)
    assert_contained(output, secret)
    assert alive, "the other run was stopped"
    assert_next_run_is_clean(sandbox, markers=[tag])
