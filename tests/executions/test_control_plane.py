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
    assert_next_run_is_clean,
    host_processes_with,
    marker,
    run,
    start_in_background,
    wait_for_output,
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
    config, instance = any_sandbox
    reason = LIMITATIONS.get((config, request.node.originalname))
    if reason:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))
    return instance


def attempt(sandbox: Sandbox, code: str, **limits) -> str:
    """Run attack code that prints ``REACHED ...`` for every success; return its output."""
    outcome, sink = run(sandbox, PRELUDE + code, timeout_seconds=20, **limits)
    assert "tried" in sink.stdout, (outcome, sink.stdout, sink.stderr[-2000:])
    return sink.stdout


def assert_contained(output: str, *secrets: str) -> None:
    assert "REACHED" not in output, output
    for secret in secrets:
        assert secret not in output, output


# Every attack tries each step and reports; an error is what containment looks like.
PRELUDE = """
import os, signal, socket, sqlite3
def step(what, action):
    try:
        result = action()
        print("REACHED", what, repr(result)[:200])
    except Exception as exc:
        print("blocked", what, type(exc).__name__, exc)
def read(path):
    with open(path, "rb") as f:
        return f.read(200)
def write(path):
    with open(path, "w") as f:
        f.write("escaped")
    return path
def listing(path):
    try:
        return os.listdir(path)
    except OSError as exc:
        print("blocked listing", path, exc)
        return []
"""


# --- Airlock's own state ----------------------------------------------------------------


def test_the_database_is_out_of_reach(sandbox, control_plane):
    path = str(control_plane.database)
    output = attempt(
        sandbox,
        f"db = {path!r}\n"
        "uri = 'file:%s?mode=rw' % db\n"
        "step('read the database file', lambda: read(db))\n"
        "step('query the policy', lambda: sqlite3.connect(uri, uri=True, timeout=1)"
        ".execute('select * from policy').fetchall())\n"
        "def hijack():\n"
        "    c = sqlite3.connect(uri, uri=True, timeout=1)\n"
        "    c.execute('create table hijacked (x)')\n"
        "    c.commit()\n"
        "step('write the database', hijack)\n"
        "print('tried')\n",
    )
    assert_contained(output, control_plane.secret)
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [row[0] for row in db.execute("select name from sqlite_master")]
        assert tables == ["policy"], tables
        assert db.execute("select data from policy").fetchall() == [(control_plane.secret,)]
    assert_next_run_is_clean(sandbox)


def test_the_data_dir_and_broker_folder_are_out_of_reach(sandbox, control_plane):
    tag = marker()
    data_dir, broker = str(control_plane.data_dir), str(control_plane.broker)
    output = attempt(
        sandbox,
        f"step('list the data dir', lambda: os.listdir({data_dir!r}))\n"
        f"step('list the broker folder', lambda: os.listdir({broker!r}))\n"
        f"step('read a broker message', lambda: read({broker!r} + '/message.msg'))\n"
        f"step('write into the data dir', lambda: write({data_dir!r} + '/{tag}'))\n"
        f"step('queue a broker message', lambda: write({broker!r} + '/{tag}.msg'))\n"
        "print('tried')\n",
    )
    assert_contained(output, control_plane.secret)
    assert sorted(os.listdir(data_dir)) == ["airlock.sqlite3", "broker", "secret_key"]
    assert os.listdir(broker) == ["message.msg"]
    assert_next_run_is_clean(sandbox)


def test_the_secret_key_is_out_of_reach(sandbox, control_plane):
    output = attempt(
        sandbox,
        f"step('read the secret key', lambda: read({str(control_plane.secret_file)!r}))\n"
        "print('tried')\n",
    )
    assert_contained(output, control_plane.secret)
    assert_next_run_is_clean(sandbox)


def test_the_checkout_is_out_of_reach(sandbox, control_plane):
    tag = marker()
    settings_file = str(CHECKOUT / "console" / "settings.py")
    own = str(control_plane.checkout)
    output = attempt(
        sandbox,
        f"step('read console/settings.py', lambda: read({settings_file!r}))\n"
        f"step('list the checkout', lambda: os.listdir({str(CHECKOUT)!r}))\n"
        f"step('read the server-owned checkout', lambda: read({own!r} + '/console/settings.py'))\n"
        f"step('write the server-owned checkout', lambda: write({own!r} + '/console/{tag}.py'))\n"
        f"step('write the checkout', lambda: write({str(CHECKOUT)!r} + '/{tag}.py'))\n"
        "print('tried')\n",
    )
    assert_contained(output, control_plane.secret)
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
    output = attempt(
        sandbox,
        f"for host, port in {targets!r}:\n"
        "    step('connect to %s:%s' % (host, port),"
        " lambda: socket.create_connection((host, port), timeout=2).close())\n"
        f"for path in {sockets!r}:\n"
        "    def unix():\n"
        "        with socket.socket(socket.AF_UNIX) as s:\n"
        "            s.connect(path)\n"
        "    step('connect to ' + path, unix)\n"
        "print('tried')\n",
    )
    assert_contained(output)
    assert_next_run_is_clean(sandbox)


# --- the worker ---------------------------------------------------------------------------


def test_the_worker_environment_is_out_of_reach(sandbox, control_plane):
    pid = control_plane.worker_pid
    output = attempt(
        sandbox,
        "print('own environment', sorted(os.environ.items()))\n"
        f"step('read the worker environment', lambda: read('/proc/{pid}/environ'))\n"
        f"step('read the worker command line', lambda: read('/proc/{pid}/cmdline'))\n"
        "print('tried')\n",
    )
    assert_contained(output, control_plane.secret, control_plane.worker_marker)
    assert "SECRET_KEY" not in output and "DATABASE_URL" not in output
    assert_next_run_is_clean(sandbox)


def test_the_worker_cannot_be_signalled(sandbox, any_sandbox, control_plane):
    pid = control_plane.worker_pid
    code = f"step('stop the worker', lambda: os.kill({pid}, signal.SIGKILL))\n"
    if any_sandbox[0] != "local-rlimits" or ROOT:
        # Everything this uid may signal (as the worker's own uid, this test run too);
        # whether it "worked" shows on the host: the worker must still be there.
        code += "step('signal every process', lambda: os.kill(-1, signal.SIGKILL))\n"
    output = attempt(sandbox, code + "print('tried')\n")
    assert "REACHED stop the worker" not in output, output
    assert host_processes_with(control_plane.worker_marker) == [pid]
    assert_next_run_is_clean(sandbox)


def test_the_host_process_list_is_hidden(sandbox, control_plane):
    output = attempt(
        sandbox,
        "pids = [p for p in listing('/proc') if p.isdigit()]\n"
        "for pid in pids:\n"
        "    try:\n"
        "        if read('/proc/%s/cmdline' % pid).find(b'airlock-adv-') >= 0:\n"
        "            print('REACHED a host process', pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "if len(pids) > 20:\n"
        "    print('REACHED the host process list:', len(pids), 'processes')\n"
        "print('visible', len(pids))\n"
        "print('tried')\n",
    )
    assert_contained(output, control_plane.worker_marker)
    assert_next_run_is_clean(sandbox)


# --- the host's shared places, and other runs -------------------------------------------------


def test_nothing_reaches_the_host_tmp_home_or_data_dir(sandbox, control_plane):
    tag = marker()
    places = ["/tmp", "/var/tmp", "/dev/shm", str(control_plane.home)]
    places += [str(control_plane.data_dir), str(control_plane.checkout)]
    paths = [os.path.join(place, tag) for place in places]
    code = (
        f"for path in {paths!r}:\n"
        "    step('write ' + path, lambda: write(path))\n"
        "print('written', flush=True)\n"
        "import time\ntime.sleep(30)\n"
    )
    thread, sink, cancel, _ = start_in_background(sandbox, PRELUDE + code, timeout_seconds=40)
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
    paths = [os.path.join(os.path.expanduser(p) if p == "~" else p, tag) for p in places]
    output = attempt(
        sandbox,
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        write(os.path.expanduser(path))\n"
        "        print('left', path)\n"
        "    except OSError as exc:\n"
        "        print('could not leave', path, exc)\n"
        "print('tried')\n",
    )
    assert "left ./" in output, output  # the run's own dir is writable
    found = attempt(
        sandbox,
        f"for path in {paths!r}:\n"
        "    if os.path.exists(os.path.expanduser(path)):\n"
        "        print('REACHED a file of the last run', path)\n"
        "print('tried')\n",
    )
    assert_contained(found)


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
        output = attempt(
            sandbox,
            "import glob\n"
            f"for pid in {pids!r} + [p for p in listing('/proc') if p.isdigit()]:\n"
            "    try:\n"
            f"        if {tag!r}.encode() in read('/proc/%s/cmdline' % pid):\n"
            "            print('REACHED the other run', pid)\n"
            "            step('its files', lambda: os.listdir('/proc/%s/cwd' % pid))\n"
            "    except OSError:\n"
            "        pass\n"
            f"for pid in {pids!r}:\n"
            "    step('stop the other run', lambda: os.kill(pid, signal.SIGKILL))\n"
            "for path in glob.glob('/tmp/*/*/secret.txt') + glob.glob('/tmp/*/secret.txt'):\n"
            "    step('read ' + path, lambda: read(path))\n"
            "print('tried')\n",
        )
        alive = not ended and host_processes_with(tag) == pids
    finally:
        cancel.set()
        thread.join(15)
    assert_contained(output, secret)
    assert alive, "the other run was stopped"
    assert_next_run_is_clean(sandbox, markers=[tag])
