"""The local sandbox backend and its persistent sessions, with every confinement method.

Attacks live in test_sandbox_adversarial.py; these are the ordinary behaviours:
languages, streaming, limits, environment, cancel, clean-up, sessions.
"""

from __future__ import annotations

import os
import resource
import tempfile
import threading
import time

import pytest

from executions.sandboxes import local
from executions.sandboxes.base import (
    Limits,
    MemorySink,
    OutputSink,
    RunRequest,
    SandboxError,
    SandboxUnavailable,
    UnsupportedLanguage,
)
from executions.sandboxes.local import (
    LocalSandbox,
    backend,
    host,
    probes,
    programs,
    seccomp,
)
from executions.sandboxes.local.rlimits import rlimits_for
from tests.executions.conftest import selected_configs
from tests.support import require

ROOT = os.geteuid() == 0


LOCAL_METHODS = [
    name.removeprefix("local-") for name in selected_configs() if name.startswith("local-")
]


def open_sandbox(method: str):
    """A local sandbox confined by ``method``, closed afterwards (skipped where it cannot work)."""
    problem = local.method_problems()[method]
    require(problem is None, f"local method {method}: {problem}")
    instance = LocalSandbox(method=method)
    yield instance
    instance.close()


@pytest.fixture(scope="module", params=LOCAL_METHODS)
def sandbox(request):
    yield from open_sandbox(request.param)


def run(sandbox, code, language="python", sink=None, cancel=None, **limits):
    sink = sink if sink is not None else MemorySink()
    limits = {"timeout_seconds": 10, **limits}
    outcome = sandbox.run(RunRequest(language, code, Limits(**limits)), sink, cancel)
    return outcome, sink


class TimedSink(OutputSink):
    """Records when each piece of output arrived."""

    def __init__(self):
        super().__init__()
        self.arrivals: list[tuple[float, str]] = []

    def emit(self, stream, text):
        self.arrivals.append((time.monotonic(), text))


# --- languages and results -------------------------------------------------------------


def test_it_runs_python_and_separates_the_streams(sandbox):
    outcome, sink = run(sandbox, "import sys\nprint('hi')\nprint('oops', file=sys.stderr)")
    assert outcome.success and outcome.exit_code == 0
    assert (sink.stdout, sink.stderr) == ("hi\n", "oops\n")
    assert outcome.backend == "local"
    assert outcome.details["isolation"] == sandbox.isolation
    assert outcome.details["limits"]["timeout_seconds"] == 10


def test_it_runs_bash(sandbox):
    outcome, sink = run(sandbox, 'echo "$((6 * 7))"; exit 3', language="bash")
    assert sink.stdout == "42\n"
    assert outcome.exit_code == 3 and not outcome.success


def test_it_runs_javascript_when_node_is_installed(sandbox):
    require(programs._which("node") is not None, "node is not installed")
    outcome, sink = run(sandbox, "console.log([1, 2, 3].map((x) => x * 2).join(','))", "javascript")
    assert outcome.success, sink.stderr
    assert sink.stdout == "2,4,6\n"


def test_javascript_without_node_says_what_is_missing(sandbox, monkeypatch):
    monkeypatch.setattr(programs, "_which", lambda name: None)
    with pytest.raises(UnsupportedLanguage, match="node"):
        run(sandbox, "console.log(1)", "javascript")


def test_an_unknown_language_is_refused(sandbox):
    with pytest.raises(UnsupportedLanguage):
        run(sandbox, "puts 1", "ruby")


def test_an_exception_is_a_failure_with_its_traceback(sandbox):
    outcome, sink = run(sandbox, "raise ValueError('boom')")
    assert outcome.exit_code == 1 and not outcome.success
    assert "ValueError: boom" in sink.stderr


def test_a_large_script_is_written_to_a_file_not_argv(sandbox):
    # Far beyond one argv string's limit (128 KiB).
    code = "data = '" + "x" * 2_000_000 + "'\nprint(len(data))\n"
    outcome, sink = run(sandbox, code)
    assert outcome.success, sink.stderr[-500:]
    assert sink.stdout == "2000000\n"


def test_non_ascii_code_and_output_survive(sandbox):
    outcome, sink = run(sandbox, "print('héllo → 世界')")
    assert sink.stdout == "héllo → 世界\n", sink.stderr


# --- environment, stdin, work dir -----------------------------------------------------


def test_the_environment_is_scrubbed(sandbox, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "do-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://x:do-not-leak@db/x")
    outcome, sink = run(sandbox, "import os\nprint(sorted(os.environ))\nprint(os.environ['HOME'])")
    names = eval(sink.stdout.splitlines()[0])
    assert set(names) <= {"PATH", "HOME", "LANG", "TMPDIR", "PWD"}
    assert {"PATH", "HOME", "LANG", "TMPDIR"} <= set(names)
    assert "do-not-leak" not in sink.stdout


def test_home_is_the_work_dir_and_it_is_writable(sandbox):
    code = "import os\nopen('f.txt', 'w').write('x')\nprint(os.getcwd() == os.environ['HOME'])"
    outcome, sink = run(sandbox, code)
    assert outcome.success and sink.stdout == "True\n", sink.stderr


def test_stdin_is_closed(sandbox):
    outcome, sink = run(sandbox, "import sys\nprint(repr(sys.stdin.read()))")
    assert sink.stdout == "''\n", sink.stderr


def test_the_work_dir_is_removed_afterwards(sandbox):
    outcome, sink = run(sandbox, "import os\nopen('left.txt', 'w').write('x')\nprint(os.getcwd())")
    if sandbox.isolation != "namespaces":
        assert not os.path.exists(sink.stdout.strip())
    # In namespaces the work dir is a tmpfs of the run's own: nothing on the host.
    outcome, sink = run(sandbox, "import os\nprint(os.listdir('.'))")
    assert "left.txt" not in sink.stdout


def test_each_run_has_its_own_unprivileged_uid(sandbox):
    if not ROOT:
        pytest.skip("only a root worker can give each run its own uid")
    uids = [run(sandbox, "pass")[0].details["uid"] for _ in range(2)]
    assert uids[0] != uids[1] and 0 not in uids
    outcome, sink = run(sandbox, "import os\nprint(os.getuid(), os.geteuid())")
    assert "0" not in sink.stdout.split()


def test_the_rlimits_are_in_force(sandbox):
    code = (
        "import resource as r\n"
        "for name in ('RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_CORE', 'RLIMIT_CPU'):\n"
        "    print(name, r.getrlimit(getattr(r, name))[1])\n"
    )
    outcome, sink = run(sandbox, code, memory_mb=200, max_file_size_mb=3, timeout_seconds=4)
    limits = dict(line.split() for line in sink.stdout.splitlines())
    assert int(limits["RLIMIT_AS"]) == 200 * 1024 * 1024
    assert int(limits["RLIMIT_FSIZE"]) == 3 * 1024 * 1024
    assert int(limits["RLIMIT_CORE"]) == 0
    assert int(limits["RLIMIT_CPU"]) == 6  # the wall timeout + 1, plus a hard second


def test_without_setpriv_and_prlimit_the_limits_still_apply(sandbox, monkeypatch):
    # Then the uid and rlimits are set in a preexec_fn (a slower full fork).
    monkeypatch.setattr(host, "_launch_tools", lambda: (None, None))
    monkeypatch.setattr(sandbox, "_prewarm_later", lambda *args: None)
    code = "import os, resource as r\nprint(os.getuid() != 0, r.getrlimit(r.RLIMIT_AS)[1])"
    outcome, sink = run(sandbox, code, memory_mb=190)
    assert sink.stdout == f"True {190 * 1024 * 1024}\n", sink.stderr
    assert not outcome.details["warm"]


def test_node_gets_a_data_limit_instead_of_an_address_space_limit():
    rlimits = {res: (soft, hard) for res, soft, hard in rlimits_for(Limits(), "javascript")}
    assert resource.RLIMIT_AS not in rlimits
    assert rlimits[resource.RLIMIT_DATA] == (256 * 1024 * 1024, 256 * 1024 * 1024)


def test_namespaced_runs_have_no_network_and_a_read_only_root(sandbox):
    if sandbox.isolation != "namespaces":
        pytest.skip("only in namespaces")
    code = (
        "import socket\nprint(sorted(n for _, n in socket.if_nameindex()))\n"
        "try:\n    open('/usr/x', 'w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
    )
    outcome, sink = run(sandbox, code)
    assert sink.stdout == "['lo']\nro 30\n", sink.stderr


def test_namespaced_runs_see_only_the_needed_part_of_etc(sandbox):
    if sandbox.isolation != "namespaces":
        pytest.skip("only in namespaces")
    outcome, sink = run(sandbox, "import os\nprint(sorted(os.listdir('/etc')))")
    visible = set(eval(sink.stdout))
    assert visible <= {entry.split("/")[0] for entry in host.ETC_ENTRIES}
    assert {"passwd", "hosts", "ld.so.cache"} <= visible and "shadow" not in visible


# --- streaming, timeout, cancel -------------------------------------------------------


def test_output_streams_while_the_code_runs(sandbox):
    sink = TimedSink()
    code = "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')"
    started = time.monotonic()
    outcome, _ = run(sandbox, code, sink=sink)
    ended = time.monotonic()
    assert outcome.success
    first_at = next(at for at, text in sink.arrivals if "first" in text)
    assert ended - first_at > 1.0, "output arrived only at the end"
    assert first_at - started < 1.0


def test_a_timeout_stops_the_run(sandbox):
    outcome, sink = run(
        sandbox, "import time\nprint('start', flush=True)\ntime.sleep(30)", timeout_seconds=1
    )
    assert outcome.timed_out and not outcome.success
    assert 900 <= outcome.duration_ms < 3000
    assert sink.stdout == "start\n"


def test_cancel_stops_the_run_within_a_second(sandbox):
    cancel = threading.Event()
    tag = f"airlock-cancel-{os.getpid()}-{time.monotonic_ns()}"
    code = f"import os, time\nif os.fork() == 0:\n    os.execv('/bin/sleep', ['{tag}', '60'])\ntime.sleep(60)"
    threading.Timer(0.7, cancel.set).start()
    started = time.monotonic()
    outcome, _ = run(sandbox, code, cancel=cancel, timeout_seconds=60)
    assert outcome.cancelled and not outcome.timed_out and not outcome.success
    assert time.monotonic() - started < 0.7 + 1.0
    assert not host_processes_with(tag)


def test_nothing_of_a_run_is_left_when_it_returns(sandbox):
    tag = f"airlock-daemon-{os.getpid()}-{time.monotonic_ns()}"
    code = (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        null = os.open('/dev/null', os.O_RDWR)\n"
        "        for fd in (0, 1, 2):\n            os.dup2(null, fd)\n"
        f"        os.execv('/bin/sleep', ['{tag}', '60'])\n    os._exit(0)\n"
        "import time\ntime.sleep(0.2)\n"
    )
    for _ in range(3):
        outcome, _ = run(sandbox, code)
        assert outcome.success
        assert not host_processes_with(tag)  # at once: no grace period
        if ROOT:
            assert not _live_processes_of(outcome.details["uid"])


def _live_processes_of(uid: int) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            continue
        if f"\nUid:\t{uid}\t" in status and "\nState:\tZ" not in status:
            found.append(pid)
    return found


def test_output_past_the_cap_is_cut_and_flagged(sandbox):
    sink = MemorySink(cap_bytes=1000)
    outcome, _ = run(sandbox, "print('x' * 5000)", sink=sink)
    assert outcome.success
    assert sink.truncated and len(sink.stdout) == 1000


def test_a_segfault_is_a_failure(sandbox):
    outcome, _ = run(sandbox, "import ctypes\nctypes.string_at(0)")
    assert not outcome.success and outcome.exit_code not in (0, None)


def test_concurrent_runs_do_not_mix(sandbox):
    results = {}

    def one(n):
        results[n] = run(sandbox, f"import time\ntime.sleep(0.3)\nprint({n})")

    threads = [threading.Thread(target=one, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {n: sink.stdout for n, (_, sink) in results.items()} == {n: f"{n}\n" for n in range(4)}


def host_processes_with(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


# --- pre-started interpreters -----------------------------------------------------------


def _warm_run(sandbox, code, **limits):
    """Run ``code`` on an interpreter started ahead of time for these limits."""
    limits = {"timeout_seconds": 10, **limits}
    key = ("python", Limits(**limits))
    run(sandbox, "pass", **limits)
    deadline = time.monotonic() + 15
    while key not in sandbox._warm:
        assert time.monotonic() < deadline, "no interpreter was pre-started"
        time.sleep(0.02)
    outcome, sink = run(sandbox, code, **limits)
    assert outcome.details["warm"], outcome
    return outcome, sink


def test_a_pre_started_interpreter_runs_the_code_like_a_script(sandbox):
    code = (
        "print(sorted(k for k in globals() if not k.startswith('__')))\n"
        "import sys\n"
        "print(__name__, __file__.endswith('main.py'), sys.argv == [__file__])\n"
        "print(repr(sys.stdin.read()))\n"
        "raise KeyError('x')\n"
    )
    outcome, sink = _warm_run(sandbox, code, memory_mb=255)
    assert sink.stdout == "[]\n__main__ True True\n''\n", sink.stderr
    assert outcome.exit_code == 1
    assert 'main.py", line 5, in <module>' in sink.stderr and "<string>" not in sink.stderr
    assert sink.stderr.startswith("Traceback") and sink.stderr.endswith("KeyError: 'x'\n")


def test_a_pre_started_interpreter_reports_syntax_errors_like_a_script(sandbox):
    outcome, sink = _warm_run(sandbox, "x = = 1\n", memory_mb=254)
    assert outcome.exit_code == 1
    assert "SyntaxError" in sink.stderr and "<string>" not in sink.stderr


def test_a_pre_started_interpreter_honours_sys_exit(sandbox):
    outcome, _ = _warm_run(sandbox, "import sys\nsys.exit(7)\n", memory_mb=253)
    assert outcome.exit_code == 7


def test_closing_the_sandbox_ends_its_pre_started_interpreters():
    sandbox = LocalSandbox()
    _warm_run(sandbox, "pass")
    deadline = time.monotonic() + 15
    while not sandbox._warm:  # the replacement for the one just used
        assert time.monotonic() < deadline
        time.sleep(0.02)
    warm = [process for kept in sandbox._warm.values() for process in kept]
    sandbox.close()
    assert warm and all(process.poll() is not None for process in warm)


def _kept(sandbox, key, count):
    """Wait until ``count`` interpreters are pre-started for ``key`` and none is starting."""
    deadline = time.monotonic() + 15
    while len(sandbox._warm.get(key, ())) != count or key in sandbox._warming:
        assert time.monotonic() < deadline, (sandbox._warm, sandbox._warming)
        time.sleep(0.02)


def test_a_used_interpreter_is_replaced_after_its_run_unless_none_is_left():
    sandbox = LocalSandbox()
    limits = {"timeout_seconds": 10, "memory_mb": 252}
    key = ("python", Limits(**limits))
    try:
        run(sandbox, "pass", **limits)  # cold: both are started after it
        _kept(sandbox, key, backend.WARM_PER_KEY)
        started = threading.Event()
        sleeper = threading.Thread(
            target=run,
            args=(sandbox, "print(1, flush=True)\nimport time\ntime.sleep(1)"),
            kwargs={"sink": _Signalling(started), **limits},
        )
        sleeper.start()
        assert started.wait(10)
        # While it runs, the other one waits and nothing starts beside the run.
        assert len(sandbox._warm[key]) == backend.WARM_PER_KEY - 1
        assert key not in sandbox._warming
        # A second run meanwhile takes the last one, which is replaced at once.
        outcome, _ = run(sandbox, "pass", **limits)
        assert outcome.details["warm"]
        deadline = time.monotonic() + 15
        while not sandbox._warm.get(key):
            assert sleeper.is_alive(), "replaced only after the first run ended"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        sleeper.join()
        _kept(sandbox, key, backend.WARM_PER_KEY)  # and topped up once the run ended
    finally:
        sandbox.close()


class _Signalling(MemorySink):
    def __init__(self, event: threading.Event):
        super().__init__()
        self.event = event

    def emit(self, stream: str, text: str) -> None:
        super().emit(stream, text)
        self.event.set()


# --- probe and configuration -------------------------------------------------------------


def test_probe_reports_the_strongest_method_that_works_here():
    availability = LocalSandbox.probe()
    problems = local.method_problems()
    best = next(name for name, problem in problems.items() if problem is None)
    assert availability.ok and availability.isolation == probes.METHODS[best]
    assert LocalSandbox().method == best
    # Set by scripts/test for the passes that hide programs: proves the hiding took.
    if expected := os.environ.get("AIRLOCK_EXPECT_LOCAL_METHOD"):
        assert best == expected, problems


# method -> (the host probe it rests on, what that probe answers where it does not work)
BROKEN = {
    "bwrap": ("_bwrap_features", lambda: (None, "bwrap missing", frozenset())),
    "unshare": ("_unshare_problem", lambda: "user namespaces refused"),
    "landlock": ("_landlock_problem", lambda: "no Landlock"),
}


def _only(monkeypatch, *working):
    """Pretend only the named methods work on this host (rlimits always does)."""
    for method, (probe, broken) in BROKEN.items():
        if method not in working:
            monkeypatch.setattr(probes, probe, broken)


def test_without_bubblewrap_the_probe_says_namespaces(monkeypatch):
    _only(monkeypatch, "unshare", "landlock")
    availability = LocalSandbox.probe()
    assert availability.isolation == "namespaces" and "bwrap missing" in availability.reason
    assert LocalSandbox().method == "unshare"
    with pytest.raises(SandboxUnavailable, match="bwrap missing"):
        LocalSandbox(method="bwrap")


def test_without_user_namespaces_the_probe_says_landlock(monkeypatch):
    _only(monkeypatch, "landlock")
    availability = LocalSandbox.probe()
    assert availability.isolation == "landlock"
    assert "user namespaces refused" in availability.reason
    assert LocalSandbox().method == "landlock"


def test_with_nothing_the_probe_says_weak_and_why(monkeypatch):
    _only(monkeypatch)
    availability = LocalSandbox.probe()
    assert availability.ok and availability.isolation == "weak"
    for reason in ("bwrap missing", "user namespaces refused", "no Landlock"):
        assert reason in availability.reason
    assert LocalSandbox().isolation == "weak"


def test_an_unknown_method_is_refused():
    with pytest.raises(SandboxUnavailable, match="unknown local method"):
        LocalSandbox(method="chroot")


def test_the_local_backend_refuses_network_access(sandbox):
    # A run would share the host's network, where the control plane listens.
    with pytest.raises(SandboxError, match="no network"):
        run(sandbox, "print(1)", network=True)


def test_the_seccomp_filter_is_well_formed():
    program = seccomp.seccomp_program()
    if program is None:
        pytest.skip("x86_64 only")
    assert len(program) % 8 == 0 and len(program) // 8 < 255


def test_work_dirs_of_a_dead_worker_are_removed():
    stale = tempfile.mkdtemp(prefix=f"{host.BASE_DIR_PREFIX}999999999-")  # no such pid
    alive = tempfile.mkdtemp(prefix=f"{host.BASE_DIR_PREFIX}{os.getpid()}-")
    try:
        host._remove_stale_base_dirs.__wrapped__()
        assert not os.path.exists(stale) and os.path.exists(alive)
    finally:
        os.rmdir(alive)


def test_a_forked_worker_leaves_the_parents_dirs_alone(sandbox):
    # Celery's prefork pool forks workers from a parent that may have used the sandbox.
    run(sandbox, "pass")
    snapshot, parent = host._etc_snapshot(), os.getpid()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        code = 1
        try:
            _, sink = run(sandbox, "print('child')")
            backend._close_open_instances()  # what atexit does when the child exits
            host._remove_if_mine(snapshot, parent)
            code = 0 if sink.stdout == "child\n" else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.isdir(snapshot)
    assert run(sandbox, "print('parent')")[1].stdout == "parent\n"


def test_runs_that_start_together_share_one_copy_of_etc(monkeypatch):
    made = []
    real = host.tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(host.tempfile, "mkdtemp", mkdtemp)
    host._make_etc_snapshot.cache_clear()
    snapshots = []
    starters = [
        threading.Thread(target=lambda: snapshots.append(host._etc_snapshot())) for _ in range(4)
    ]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join()
    assert len(made) == 1 and snapshots == made * 4
    assert os.path.isfile(os.path.join(made[0], "passwd"))
