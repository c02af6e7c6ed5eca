"""The adversarial suite: every attack against every sandbox configuration of this host.

Each case shows the attack is contained AND that the next normal run on the
same sandbox instance is clean. Configurations come from ``any_sandbox``
(tests/executions/conftest.py): local with each confinement method (rlimits,
Landlock, its own namespaces, bubblewrap), docker and gvisor in one-shot and
keep-alive mode. Docker and gVisor skip with their
probe's reason where the engine or runsc is missing (and fail under CI=true).

The weak fallback (local with rlimits only) cannot contain some attacks, and
Landlock alone cannot cap the disk; those combinations are listed in
``LIMITATIONS`` and run as strict xfails, so they fail loudly the day they
start passing. The weak probe says "weak", the console shows it in red, and
policy never approves a script into it on its own.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import tempfile

import pytest

from executions.sandboxes.base import Sandbox
from tests.executions.attacks import (
    LISTING,
    MB,
    PTRACE,
    assert_next_run_is_clean,
    assert_no_connection,
    assert_no_host_process_with,
    assert_stopped_within,
    listener,
    marker,
    primary_ip,
    run,
    start_in_background,
    wait_for_output,
    with_limitations,
)
from tests.support import port_open, require

ROOT = os.geteuid() == 0
WEAK = "local with rlimits only (no namespaces, no Landlock)"

NETWORK_CASES = (
    "test_network_egress_by_ip",
    "test_network_egress_by_name",
    "test_network_egress_to_the_metadata_address",
    "test_network_egress_to_the_console_port",
    "test_network_egress_to_postgres",
    "test_network_egress_to_redis",
)
# (configuration, test name) -> why the configuration cannot contain it.
LIMITATIONS: dict[tuple[str, str], str] = {
    ("local-rlimits", name): f"{WEAK}: no network namespace, the host network is reachable"
    for name in NETWORK_CASES
}
for _config in ("local-rlimits", "local-landlock"):
    LIMITATIONS[(_config, "test_disk_fill_is_capped")] = (
        f"{_config}: the work dir is on the host disk, only RLIMIT_FSIZE caps one file"
    )
if not ROOT:
    # Without root the run cannot get a uid of its own: it shares the worker's.
    for _name in (
        "test_another_runs_directory_is_unreadable",
        "test_files_planted_in_tmp_and_shm_are_not_seen_by_the_next_run",
        "test_proc_environ_shows_no_worker_secret",
        "test_writing_outside_the_work_dir_fails",
    ):
        LIMITATIONS[("local-rlimits", _name)] = (
            f"{WEAK} and the worker is not root: runs share the worker's uid"
        )


@pytest.fixture
def sandbox(any_sandbox, request) -> Sandbox:
    return with_limitations(*any_sandbox, request, LIMITATIONS)


# --- processes and CPU -------------------------------------------------------------

FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def test_fork_bomb_is_contained(sandbox):
    tag = marker()
    # Re-exec with a marker in argv so the host can look for survivors afterwards.
    code = f"import os, sys\nos.execv(sys.executable, [sys.executable, '-S', '-c', {FORK_BOMB!r}, {tag!r}])\n"
    outcome, _ = run(sandbox, code, timeout_seconds=2, max_processes=32)
    assert_stopped_within(outcome, 2)
    assert_no_host_process_with(tag)
    assert_next_run_is_clean(sandbox, markers=[tag])


def test_thread_bomb_is_contained(sandbox):
    code = (
        "import threading, time\n"
        "while True:\n"
        "    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n"
    )
    outcome, _ = run(sandbox, code, timeout_seconds=3, max_processes=32)
    assert_stopped_within(outcome, 3)
    assert_next_run_is_clean(sandbox)


def test_memory_bomb_is_contained(sandbox):
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))\n"
    outcome, _ = run(sandbox, code, timeout_seconds=10, memory_mb=128)
    assert not outcome.success and not outcome.timed_out, outcome
    assert_next_run_is_clean(sandbox)


def test_slow_memory_growth_hits_the_memory_limit(sandbox):
    code = (
        "import time\nchunks = []\n"
        "while True:\n    chunks.append(b'x' * 8 * 1024 * 1024)\n    time.sleep(0.01)\n"
    )
    outcome, _ = run(sandbox, code, timeout_seconds=10, memory_mb=128)
    assert not outcome.success and not outcome.timed_out, outcome
    assert_next_run_is_clean(sandbox)


def test_cpu_loop_is_stopped(sandbox):
    outcome, _ = run(sandbox, "while True:\n    pass\n", timeout_seconds=2)
    assert_stopped_within(outcome, 2)
    assert_next_run_is_clean(sandbox)


def test_sleep_past_the_wall_limit_times_out(sandbox):
    outcome, _ = run(sandbox, "import time\ntime.sleep(60)\n", timeout_seconds=1.5)
    assert outcome.timed_out, outcome
    assert_stopped_within(outcome, 1.5)
    assert_next_run_is_clean(sandbox)


# A real daemon: new session, double fork, stdio on /dev/null (so the run's
# pipes reach end-of-file while it lives on).
DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv("/bin/sleep", ["{marker}", "300"])
    os._exit(0)
time.sleep(0.3)
print("daemon started", flush=True)
"""


def test_setsid_double_fork_is_gone_after_the_timeout(sandbox):
    tag = marker()
    code = DAEMON.format(marker=tag) + "time.sleep(60)\n"
    outcome, sink = run(sandbox, code, timeout_seconds=2)
    assert "daemon started" in sink.stdout, (sink.stdout, sink.stderr)
    assert outcome.timed_out, outcome
    assert_no_host_process_with(tag)
    assert_next_run_is_clean(sandbox, markers=[tag])


def test_setsid_double_fork_is_gone_after_a_normal_exit(sandbox):
    tag = marker()
    outcome, sink = run(sandbox, DAEMON.format(marker=tag), timeout_seconds=10)
    assert "daemon started" in sink.stdout, (sink.stdout, sink.stderr)
    assert outcome.duration_ms < 8000, outcome  # the leftover daemon did not hold the run open
    assert_no_host_process_with(tag)
    assert_next_run_is_clean(sandbox, markers=[tag])


def test_interpreter_segfault_is_a_failure(sandbox):
    outcome, _ = run(sandbox, "import ctypes\nctypes.string_at(0)\n")
    assert not outcome.success, outcome
    assert outcome.exit_code not in (0, None), outcome
    assert_next_run_is_clean(sandbox)


# --- output ------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_100_mb_of_output_is_truncated_with_bounded_memory(sandbox):
    before = _peak_rss_mb()
    code = "import sys\nfor _ in range(100 * 16):\n    sys.stdout.write('y' * 65535 + '\\n')\n"
    outcome, sink = run(sandbox, code, cap=MB, timeout_seconds=60)
    assert outcome.success, (outcome, sink.stderr[-500:])
    assert sink.truncated and sink.kept_bytes == MB
    assert sink.dropped_bytes == 100 * MB - MB
    assert _peak_rss_mb() - before < 64
    assert_next_run_is_clean(sandbox)


def test_one_huge_line_is_truncated_and_finishes(sandbox):
    before = _peak_rss_mb()
    code = "import sys\nfor _ in range(100):\n    sys.stdout.buffer.write(b'z' * 1024 * 1024)\n"
    outcome, sink = run(sandbox, code, cap=MB, timeout_seconds=60)
    assert outcome.success, (outcome, sink.stderr[-500:])
    assert sink.truncated and sink.stdout == "z" * MB
    assert _peak_rss_mb() - before < 64
    assert_next_run_is_clean(sandbox)


def test_invalid_utf8_becomes_replacement_characters(sandbox):
    code = (
        "import sys, time\nout = sys.stdout.buffer\n"
        "out.write(b'ok \\xff\\xfe\\xc3\\x28 end\\n'); out.flush()\n"
        "out.write(b'euro \\xe2\\x82'); out.flush(); time.sleep(0.1)\n"
        "out.write(b'\\xac\\n'); out.flush()\n"
        "sys.stderr.buffer.write(b'bad \\x80\\n')\n"
    )
    outcome, sink = run(sandbox, code)
    assert outcome.success, (outcome, sink.stderr)
    assert sink.stdout == "ok \ufffd\ufffd\ufffd( end\neuro \u20ac\n"
    assert sink.stderr == "bad \ufffd\n"
    assert_next_run_is_clean(sandbox)


# --- files -------------------------------------------------------------------------

FILL = """
import os
total, n = 0, 0
try:
    while total < {ceiling}:
        with open("fill-%d" % n, "wb") as f:
            for _ in range(4):
                f.write(b"x" * 1024 * 1024)
                total += 1024 * 1024
        n += 1
except OSError as exc:
    print("stopped:", exc)
print("written", total)
"""


def test_disk_fill_is_capped(sandbox):
    disk_mb = 16
    code = FILL.format(ceiling=6 * disk_mb * MB)
    outcome, sink = run(sandbox, code, timeout_seconds=20, disk_mb=disk_mb, max_file_size_mb=8)
    written = [
        int(line.split()[1]) for line in sink.stdout.splitlines() if line.startswith("written")
    ]
    assert written, (outcome, sink.stdout, sink.stderr[-1000:])
    assert written[0] <= 2 * disk_mb * MB, f"wrote {written[0] // MB} MB with a {disk_mb} MB disk"
    assert_next_run_is_clean(sandbox)


def test_a_single_file_is_capped_by_the_file_size_limit(sandbox):
    code = (
        "total = 0\ntry:\n    with open('big', 'wb') as f:\n"
        "        while total < 64 * 1024 * 1024:\n"
        "            f.write(b'x' * 1024 * 1024)\n            total += 1024 * 1024\n"
        "except OSError as exc:\n    print('stopped', exc)\nprint('written', total)\n"
    )
    outcome, sink = run(sandbox, code, timeout_seconds=20, max_file_size_mb=4, disk_mb=64)
    assert "written 67108864" not in sink.stdout, (outcome, sink.stdout)
    assert_next_run_is_clean(sandbox)


def test_many_small_files_are_cleaned_up(sandbox):
    code = (
        "import os, time\nn = 0\nend = time.monotonic() + 2\n"
        "try:\n    while time.monotonic() < end and n < 50000:\n"
        "        open('f%d' % n, 'w').close()\n        n += 1\n"
        "except OSError as exc:\n    print('stopped', exc)\nprint('files', n)\n"
    )
    outcome, sink = run(sandbox, code, timeout_seconds=10)
    assert "files" in sink.stdout, (outcome, sink.stdout, sink.stderr[-1000:])
    assert_next_run_is_clean(sandbox)


PLANT = """
import os
for path in {paths!r}:
    try:
        with open(path, "w") as f:
            f.write("planted")
        print("planted", path)
    except OSError as exc:
        print("could not plant", path, exc)
"""


def test_files_planted_in_tmp_and_shm_are_not_seen_by_the_next_run(sandbox, any_sandbox):
    config = any_sandbox[0]
    tag = marker()
    paths = [f"/tmp/{tag}", f"/dev/shm/{tag}", f"/var/tmp/{tag}"]
    outcome, sink = run(sandbox, PLANT.format(paths=paths))
    # Landlock alone refuses the host's /tmp; everywhere else /tmp is the run's own.
    planted = "could not plant /tmp/" if config == "local-landlock" else "planted /tmp/"
    assert planted in sink.stdout, (outcome, sink.stdout, sink.stderr)
    assert not any(os.path.exists(p) for p in paths), "planted files reached the host"
    assert_next_run_is_clean(sandbox, paths=paths)


READ_FILES = """
for path in {paths!r}:
    try:
        with open(path, "rb") as f:
            print("READ", path, f.read(200))
    except OSError as exc:
        print("denied", path, exc)
"""


def test_reading_etc_shadow_fails(sandbox):
    outcome, sink = run(sandbox, READ_FILES.format(paths=["/etc/shadow", "/etc/gshadow"]))
    assert "denied /etc/shadow" in sink.stdout, (outcome, sink.stdout, sink.stderr)
    assert "READ" not in sink.stdout, sink.stdout
    assert_next_run_is_clean(sandbox)


VICTIM_WITH_SECRET = """
import os, time
with open("secret.txt", "w") as f:
    f.write("{secret}")
print("cwd", os.getcwd())
print("ready", flush=True)
time.sleep(30)
"""

HUNT_SECRET = """
import glob, os
candidates = [{victim_dir!r}, os.path.join({victim_dir!r}, "secret.txt")]
candidates += glob.glob("/tmp/*/secret.txt") + glob.glob("/tmp/*/*/secret.txt")
candidates += glob.glob("/var/tmp/*/*/secret.txt") + glob.glob(os.path.join(os.path.dirname(os.getcwd()), "*", "secret.txt"))
for path in candidates:
    try:
        if os.path.isdir(path):
            print("listed", path, os.listdir(path))
        else:
            with open(path) as f:
                print("READ", path, f.read())
    except OSError as exc:
        print("denied", path, exc)
"""


def test_another_runs_directory_is_unreadable(sandbox):
    secret = marker()
    thread, victim, cancel, _ = start_in_background(
        sandbox, VICTIM_WITH_SECRET.format(secret=secret), timeout_seconds=30
    )
    try:
        wait_for_output(victim, "ready")
        victim_dir = victim.stdout.split("cwd ", 1)[1].split("\n", 1)[0]
        outcome, sink = run(sandbox, HUNT_SECRET.format(victim_dir=victim_dir))
    finally:
        cancel.set()
        thread.join(10)
    assert secret not in sink.stdout, sink.stdout
    assert outcome.exit_code == 0, (outcome, sink.stderr[-1000:])
    assert_next_run_is_clean(sandbox)


WRITE_OUTSIDE = """
import os
for path in {paths!r}:
    try:
        with open(path, "w") as f:
            f.write("escaped")
        print("WROTE", path)
    except OSError as exc:
        print("denied", path, exc)
"""


def test_writing_outside_the_work_dir_fails(sandbox, tmp_path):
    tag = marker()
    host_dirs = ["/etc", "/usr", "/", "/root", "/var", "/home", os.getcwd(), str(tmp_path)]
    paths = [os.path.join(d, tag) for d in host_dirs]
    outcome, sink = run(sandbox, WRITE_OUTSIDE.format(paths=paths))
    assert "denied" in sink.stdout, (outcome, sink.stdout, sink.stderr)
    assert "WROTE" not in sink.stdout, sink.stdout
    assert not [p for p in paths if os.path.exists(p)]
    assert_next_run_is_clean(sandbox, paths=paths)


# --- network -----------------------------------------------------------------------


def test_network_egress_by_ip(sandbox):
    ip = primary_ip()
    if ip.startswith("127."):
        pytest.skip("this host has no non-loopback address to connect to")
    with listener() as port:
        assert_no_connection(sandbox, [(ip, port)])


def test_network_egress_by_name(sandbox):
    with listener() as port:
        assert_no_connection(sandbox, [(socket.gethostname(), port), ("localhost", port)])


def test_network_egress_to_the_metadata_address(sandbox):
    if not port_open("169.254.169.254", 80, timeout=2):
        pytest.skip("169.254.169.254:80 does not answer on this host")
    assert_no_connection(sandbox, [("169.254.169.254", 80)])


def test_network_egress_to_the_console_port(sandbox):
    # The console (Daphne) listens on the worker's host; a listener stands in for it.
    with listener() as port:
        assert_no_connection(sandbox, [("127.0.0.1", port), (primary_ip(), port)])


def test_network_egress_to_postgres(sandbox):
    require(port_open("127.0.0.1", 5432), "PostgreSQL is not running on 127.0.0.1:5432")
    assert_no_connection(sandbox, [("127.0.0.1", 5432)])


def test_network_egress_to_redis(sandbox):
    require(port_open("127.0.0.1", 6379), "Redis is not running on 127.0.0.1:6379")
    assert_no_connection(sandbox, [("127.0.0.1", 6379)])


# --- secrets, /proc, sockets, capabilities, ptrace -----------------------------------

ENVIRONMENT_HUNT = (
    LISTING
    + """
import os
print("env", sorted(os.environ.items()))
for pid in listing("/proc") + ["self"]:
    if pid.isdigit() or pid == "self":
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                print("environ", pid, f.read())
        except OSError as exc:
            print("denied", pid, exc)
"""
)


@pytest.fixture
def worker_secrets(monkeypatch) -> str:
    secret = marker()
    monkeypatch.setenv("SECRET_KEY", secret)
    monkeypatch.setenv("DATABASE_URL", f"postgres://airlock:{secret}@127.0.0.1/airlock")
    monkeypatch.setenv("REDIS_URL", f"redis://:{secret}@127.0.0.1:6379/0")
    return secret


def test_worker_secrets_are_not_in_the_environment(sandbox, worker_secrets):
    code = "import os\nprint(sorted(os.environ.items()))\n"
    outcome, sink = run(sandbox, code)
    assert outcome.success, (outcome, sink.stderr)
    assert worker_secrets not in sink.stdout
    for name in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL"):
        assert name not in sink.stdout
    outcome, sink = run(sandbox, "echo $SECRET_KEY $DATABASE_URL; env", language="bash")
    assert outcome.success and worker_secrets not in sink.stdout, (outcome, sink.stdout)
    assert_next_run_is_clean(sandbox)


def test_proc_environ_shows_no_worker_secret(sandbox, worker_secrets):
    # /proc/PID/environ shows a process's environment as it started: a stand-in
    # worker process with the secrets in it, beside this one.
    stand_in = subprocess.Popen(["sleep", "30"], env=dict(os.environ))
    try:
        outcome, sink = run(sandbox, ENVIRONMENT_HUNT)
    finally:
        stand_in.kill()
        stand_in.wait()
    assert "environ self" in sink.stdout, (outcome, sink.stdout[-1000:], sink.stderr[-1000:])
    assert worker_secrets not in sink.stdout
    assert_next_run_is_clean(sandbox)


PROC_ROOT_HUNT = (
    LISTING
    + """
import os
me = os.getuid()
pids = ["1"]
for pid in listing("/proc"):
    if pid.isdigit() and pid != "1":
        try:
            if os.stat("/proc/" + pid).st_uid != me:
                pids.append(pid)
        except OSError:
            pass
for pid in pids:
    path = "/proc/%s/root%s" % (pid, {host_file!r})
    try:
        with open(path) as f:
            print("READ", path, f.read())
    except OSError as exc:
        print("denied", path, exc)
"""
)


def test_proc_1_root_does_not_reach_the_host(sandbox):
    secret = marker()
    folder = tempfile.mkdtemp(prefix="airlock-adv-")
    host_file = os.path.join(folder, "host-only.txt")
    try:
        os.chmod(folder, 0o755)
        with open(host_file, "w") as f:
            f.write(secret)
        os.chmod(host_file, 0o644)
        outcome, sink = run(sandbox, PROC_ROOT_HUNT.format(host_file=host_file))
    finally:
        os.unlink(host_file)
        os.rmdir(folder)
    assert "/proc/1/root" in sink.stdout, (outcome, sink.stdout, sink.stderr)
    assert secret not in sink.stdout, sink.stdout
    assert_next_run_is_clean(sandbox)


DOCKER_SOCKET = """
import socket
for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"):
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            print("CONNECTED", path)
    except OSError as exc:
        print("denied", path, exc)
"""


def test_the_docker_socket_is_unreachable(sandbox):
    outcome, sink = run(sandbox, DOCKER_SOCKET)
    assert "denied /var/run/docker.sock" in sink.stdout, (outcome, sink.stdout, sink.stderr)
    assert "CONNECTED" not in sink.stdout, sink.stdout
    assert_next_run_is_clean(sandbox)


def test_the_code_has_no_effective_capabilities(sandbox):
    code = (
        "for line in open('/proc/self/status'):\n"
        "    if line.startswith(('CapEff', 'CapPrm', 'CapAmb')):\n        print(line.strip())\n"
    )
    outcome, sink = run(sandbox, code)
    caps = dict(line.split(":") for line in sink.stdout.splitlines())
    assert int(caps["CapEff"], 16) == 0, sink.stdout
    assert int(caps["CapPrm"], 16) == 0, sink.stdout
    assert_next_run_is_clean(sandbox)


def test_ptrace_of_a_sibling_run_fails(sandbox):
    tag = marker()
    victim_code = (
        "import os, sys, time\n"
        f"os.execv('/bin/sleep', ['{tag}', '30']) if os.fork() == 0 else None\n"
        "time.sleep(0.3)\nprint('ready', flush=True)\ntime.sleep(30)\n"
    )
    thread, victim, cancel, _ = start_in_background(sandbox, victim_code, timeout_seconds=30)
    try:
        wait_for_output(victim, "ready")
        code = PTRACE.format(marker=tag, worker_pid=os.getpid())
        outcome, sink = run(sandbox, code)
    finally:
        cancel.set()
        thread.join(10)
    assert "targets" in sink.stdout, (outcome, sink.stdout, sink.stderr)
    assert "ATTACHED" not in sink.stdout, sink.stdout
    assert_no_host_process_with(tag)
    assert_next_run_is_clean(sandbox, markers=[tag])
