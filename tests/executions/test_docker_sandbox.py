"""The Docker sandbox against the real engine: refusals, streaming, the warm pool.

The refusal tests need no engine (the check runs before any client exists).
Everything else runs the real image with runc, and again with runsc where
gVisor is registered (``backend`` fixture); gVisor-only behaviour is in
test_gvisor_sandbox.py.
"""

from __future__ import annotations

import threading
import time

import docker
import pytest

from executions.sandboxes.base import Limits, MemorySink, RunRequest, UnsupportedLanguage
from executions.sandboxes.docker import DockerSandbox, SandboxConfigRefused, check_container_config
from executions.sandboxes.gvisor import GVisorSandbox
from tests.executions.conftest import require_backend
from tests.support import assert_container_removed

MB = 1024 * 1024


def run(sandbox, code, language="python", sink=None, cancel=None, **limits):
    sink = sink if sink is not None else MemorySink()
    outcome = sandbox.run(RunRequest(language, code, Limits(**limits)), sink, cancel)
    return outcome, sink


# --- refused configurations (no engine needed) ----------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"privileged": True},
        {"binds": ["/var/run/docker.sock:/var/run/docker.sock"]},
        {"binds": {"/run/docker.sock": {"bind": "/sock", "mode": "ro"}}},
        {"binds": ["/var/run:/host-run:ro"]},
        {"mounts": [docker.types.Mount("/docker.sock", "/var/run/docker.sock", type="bind")]},
        {"network_mode": "host"},
        {"pid_mode": "host"},
        {"cap_add": ["SYS_ADMIN"]},
    ],
    ids=[
        "privileged",
        "docker-socket",
        "docker-socket-dict",
        "socket-parent-dir",
        "socket-mount",
        "host-network",
        "host-pid",
        "cap-add",
    ],
)
def test_it_refuses_an_unsafe_container_config_from_kwargs(options):
    with pytest.raises(SandboxConfigRefused):
        DockerSandbox(container_options=options)


@pytest.mark.parametrize(
    "options",
    [
        {"privileged": True},
        {"binds": ["/var/run/docker.sock:/var/run/docker.sock"]},
        {"network_mode": "host"},
        {"pid_mode": "host"},
        {"cap_add": ["NET_ADMIN"]},
    ],
    ids=["privileged", "docker-socket", "host-network", "host-pid", "cap-add"],
)
def test_it_refuses_an_unsafe_container_config_from_settings(settings, options):
    settings.SANDBOX_DOCKER_OPTIONS = options
    with pytest.raises(SandboxConfigRefused):
        GVisorSandbox()


@pytest.mark.parametrize(
    "options",
    [
        {"user": "0"},
        {"user": "root"},
        {"ipc_mode": "host"},
        {"userns_mode": "host"},
        {"network_mode": "container:dockerd-neighbour"},
        {"devices": ["/dev/kmsg:/dev/kmsg"]},
        {"security_opt": []},
        {"cap_drop": []},
    ],
    ids=[
        "uid-0",
        "root",
        "host-ipc",
        "host-userns",
        "shared-netns",
        "devices",
        "new-privs",
        "caps",
    ],
)
def test_it_refuses_other_weakenings(options):
    with pytest.raises(SandboxConfigRefused):
        DockerSandbox(container_options=options)


def test_the_refusal_names_every_problem():
    with pytest.raises(SandboxConfigRefused) as caught:
        check_container_config(
            {"privileged": True, "network_mode": "host", "pid_mode": "host", "user": "10001"}
        )
    message = str(caught.value)
    assert "privileged" in message and "host network" in message and "PID" in message


# --- probes ---------------------------------------------------------------------------


def test_probe_names_a_missing_image_and_how_to_build_it(docker_ready):
    availability = DockerSandbox.check_host("airlock-no-such-image:latest", None)
    assert not availability.ok
    assert "image airlock-no-such-image:latest not found" in availability.reason
    assert "docker/sandbox/build" in availability.reason


def test_probe_names_a_missing_runtime(docker_ready, settings):
    availability = DockerSandbox.check_host(settings.SANDBOX_IMAGE, "no-such-runtime")
    assert not availability.ok
    assert "runtime no-such-runtime is not registered" in availability.reason


def test_probe_is_cheap(docker_ready):
    started = time.monotonic()
    assert DockerSandbox.probe().ok
    assert time.monotonic() - started < 1.0


# --- against the engine, runc and runsc -----------------------------------------------


@pytest.fixture(params=["docker", "gvisor"])
def backend(request):
    require_backend(request.param)
    return {"docker": DockerSandbox, "gvisor": GVisorSandbox}[request.param]


@pytest.fixture
def warm(backend, make_sandbox):
    return make_sandbox(backend, mode="keepalive")


@pytest.mark.parametrize(
    "language, code, expected",
    [
        ("python", "import sys\nprint('py', sys.version_info[0])", "py 3\n"),
        ("bash", 'echo "bash $((40 + 2))"', "bash 42\n"),
        ("javascript", "console.log('js', [1, 2].map(x => x * 2).join(','))", "js 2,4\n"),
    ],
)
def test_it_runs_every_language(warm, language, code, expected):
    outcome, sink = run(warm, code, language=language)
    assert outcome.success, (outcome, sink.stderr)
    assert sink.stdout == expected


def test_an_unknown_language_is_refused(warm):
    with pytest.raises(UnsupportedLanguage):
        run(warm, "puts 1", language="ruby")


def test_exit_code_and_stderr_come_back(warm):
    outcome, sink = run(warm, "import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)")
    assert outcome.exit_code == 3 and not outcome.success
    assert sink.stderr == "bad\n"


def merged(chunks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive chunks of one stream joined: chunk boundaries are not part of the contract."""
    out: list[tuple[str, str]] = []
    for stream, text in chunks:
        if out and out[-1][0] == stream:
            out[-1] = (stream, out[-1][1] + text)
        else:
            out.append((stream, text))
    return out


class TimedSink(MemorySink):
    """Records when each chunk arrived."""

    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def emit(self, stream, text):
        self.times.append(time.monotonic())
        super().emit(stream, text)


def test_output_streams_in_order_while_the_run_is_going(warm):
    code = (
        "import sys, time\n"
        "print('one'); time.sleep(0.4)\n"
        "print('two', file=sys.stderr); time.sleep(0.4)\n"
        "print('three')\n"
    )
    sink = TimedSink()
    outcome, _ = run(warm, code, sink=sink)
    ended = time.monotonic()
    assert outcome.success
    assert merged(sink.chunks) == [("stdout", "one\n"), ("stderr", "two\n"), ("stdout", "three\n")]
    assert ended - sink.times[0] > 0.6  # the first line arrived long before the end


def test_a_huge_output_is_capped_and_keeps_draining(warm):
    code = "import sys\nfor _ in range(200):\n    sys.stdout.buffer.write(b'x' * (512 * 1024))\n"
    started = time.monotonic()
    outcome, sink = run(warm, code, sink=MemorySink(cap_bytes=MB), timeout_seconds=60)
    assert outcome.success, (outcome, sink.stderr)
    assert sink.kept_bytes == MB and sink.dropped_bytes == 100 * MB - MB
    assert time.monotonic() - started < 30


def test_keepalive_reuses_the_warm_container(warm):
    first, _ = run(warm, "print(1)")
    second, _ = run(warm, "print(2)")
    assert first.details["container"] == second.details["container"]
    assert second.details["container_run"] == first.details["container_run"] + 1


def test_keepalive_recycles_after_max_runs(backend, make_sandbox):
    sandbox = make_sandbox(backend, mode="keepalive", max_runs=2)
    containers = [run(sandbox, "print(1)")[0].details["container"] for _ in range(3)]
    assert containers[0] == containers[1] != containers[2]


def test_keepalive_recycles_an_idle_container(backend, make_sandbox):
    sandbox = make_sandbox(backend, mode="keepalive", idle_minutes=0.5 / 60)
    first, _ = run(sandbox, "print(1)")
    time.sleep(1.0)
    sandbox.sweep()  # the pool's own sweeper may have been first; either way it is gone
    second, _ = run(sandbox, "print(1)")
    assert first.details["container"] != second.details["container"]
    assert_container_removed(first.details["container"])


def test_an_expired_container_is_replaced_at_checkout(docker_ready, make_sandbox):
    sandbox = make_sandbox(DockerSandbox, mode="keepalive", idle_minutes=0.1 / 60)
    first, _ = run(sandbox, "print(1)")
    time.sleep(0.3)  # expired, and too soon for the pool's sweeper to have seen it
    second, sink = run(sandbox, "print(2)")
    assert second.success and sink.stdout == "2\n"
    assert second.details["container"] != first.details["container"]


def test_oneshot_uses_a_fresh_container_every_time(backend, make_sandbox):
    sandbox = make_sandbox(backend, mode="oneshot")
    first, _ = run(sandbox, "print(1)")
    second, sink = run(sandbox, "print(2)")
    assert second.success and sink.stdout == "2\n"
    assert first.details["container"] != second.details["container"]


LEAVE_TRACES = """
import os, subprocess
for path in ("/tmp/left", "/dev/shm/left", "../left", "left"):
    open(path, "w").write("x")
subprocess.Popen(["sleep", "300"], start_new_session=True)
os.environ["LEFT"] = "1"
os.chdir("/tmp")
print(os.getcwd())
"""

CHECK_TRACES = """
import os
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
print(sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")))
print(sorted(os.listdir("..")), os.listdir("."))
print(others, "LEFT" in os.environ, os.getcwd())
"""


def test_nothing_a_run_leaves_behind_reaches_the_next_run(warm):
    first, sink = run(warm, LEAVE_TRACES)
    assert first.success, sink.stderr
    second, sink = run(warm, CHECK_TRACES)
    assert second.details["container"] == first.details["container"]  # the same warm one
    tmp, dirs, rest = sink.stdout.splitlines()
    assert tmp == "[] []"
    assert "left" not in dirs and dirs.endswith("[]")
    assert rest.startswith("[] False /work/run-")


def test_a_timeout_stops_the_run_and_recycles_the_container(warm):
    run(warm, "pass")  # a warm container: what is timed is the run, not a container start
    started = time.monotonic()
    outcome, sink = run(warm, "print('start', flush=True)\nwhile True: pass", timeout_seconds=1)
    assert outcome.timed_out and not outcome.success
    assert sink.stdout == "start\n"
    assert time.monotonic() - started < 4
    after, _ = run(warm, "print(1)")
    assert after.success and after.details["container"] != outcome.details["container"]


def test_cancel_stops_a_run_within_a_second(warm):
    run(warm, "pass")
    cancel = threading.Event()
    sink = MemorySink()
    results = []
    thread = threading.Thread(
        target=lambda: results.append(
            run(warm, "print('go', flush=True)\nwhile True: pass", sink=sink, cancel=cancel)
        )
    )
    thread.start()
    deadline = time.monotonic() + 20
    while "go" not in sink.stdout and time.monotonic() < deadline:
        time.sleep(0.01)
    cancel.set()
    cancelled_at = time.monotonic()
    thread.join(5)
    assert time.monotonic() - cancelled_at < 1.5
    outcome, _ = results[0]
    assert outcome.cancelled and not outcome.timed_out and not outcome.success


def test_containers_are_locked_down(warm):
    outcome, _ = run(warm, "print(1)")
    attrs = docker.from_env().api.inspect_container(outcome.details["container"])
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["Memory"] == host["MemorySwap"] > 0
    assert host["NanoCpus"] > 0 and host["PidsLimit"] > 0
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert not host["Privileged"] and not host["Binds"]
    assert host["PidMode"] == "" and host["IpcMode"] == "private"
    assert set(host["Tmpfs"]) == {"/tmp", "/work"} and host["ShmSize"] > 0
    assert attrs["Config"]["User"] == "10001:10001"
    assert attrs["Config"]["Labels"]["airlock.sandbox"] == "1"


def test_close_removes_the_warm_containers(backend):
    sandbox = backend(mode="keepalive")
    outcome, _ = run(sandbox, "print(1)")
    sandbox.close()
    assert_container_removed(outcome.details["container"])


HIJACK_THE_RUNNER = """
import os, signal
for path, mode in (("/proc/1/fd/0", "rb"), ("/proc/1/fd/1", "wb"), ("/proc/1/environ", "rb")):
    try:
        open(path, mode).close()
        print("OPENED", path)
    except OSError as exc:
        print("denied", path, exc.errno)
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
    try:
        os.kill(1, sig)
    except OSError:
        pass
print("done")
"""


def test_a_run_cannot_hijack_or_kill_the_runner(docker_ready, make_sandbox):
    warm = make_sandbox(DockerSandbox, mode="keepalive")
    first, sink = run(warm, HIJACK_THE_RUNNER)
    assert "done" in sink.stdout and "OPENED" not in sink.stdout, (sink.stdout, sink.stderr)
    second, sink = run(warm, "print('still here')")
    assert second.success and sink.stdout == "still here\n"
    assert second.details["container"] == first.details["container"]


GARBLE_THE_NEXT_REQUEST = """
import os
for path in ("/proc/1/fd/0", "/proc/1/fd/1"):
    try:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"\\x00\\x00\\x10\\x00{\\"op\\": \\"run\\", \\"code\\": \\"")
        print("wrote", path)
    except OSError as exc:
        print("denied", path, exc.errno)
"""


SMUGGLE_A_REQUEST = """
import json, os, struct
request = json.dumps({"op": "run", "language": "bash", "code": "echo smuggled", "timeout": 5})
try:
    fd = os.open("/proc/1/fd/0", os.O_WRONLY)
    os.write(fd, struct.pack("!I", len(request)) + request.encode())
    print("wrote")
except OSError as exc:
    print("denied", exc.errno)
"""


def test_a_run_cannot_smuggle_a_request_in_front_of_the_next_run(backend, make_sandbox):
    warm = make_sandbox(backend, mode="keepalive")
    run(warm, SMUGGLE_A_REQUEST)
    outcome, sink = run(warm, "print('mine')")
    assert outcome.success and sink.stdout == "mine\n", (outcome, sink.chunks)


def test_a_run_cannot_garble_the_next_request(backend, make_sandbox):
    warm = make_sandbox(backend, mode="keepalive")
    run(warm, GARBLE_THE_NEXT_REQUEST)
    outcome, sink = run(warm, "print('mine')")
    assert outcome.success and sink.stdout == "mine\n", (outcome, sink.chunks)


FORGE_THE_NEXT_RUN = """
import json, os, struct, time
fake = json.dumps({"exit_code": 0, "timed_out": False, "cancelled": False, "clean": True,
                   "duration_ms": 1, "error": None}).encode()
try:
    fd = os.open("/proc/1/fd/1", os.O_WRONLY)
    os.write(fd, struct.pack("!cI", b"X", len(fake)) + fake)
except OSError:
    pass
time.sleep(0.5)
print("forged", flush=True)
time.sleep(3)
"""


def test_a_run_cannot_forge_the_next_runs_output(backend, make_sandbox):
    warm = make_sandbox(backend, mode="keepalive")
    run(warm, FORGE_THE_NEXT_RUN)
    outcome, sink = run(warm, "print('mine')")
    assert outcome.success and sink.stdout == "mine\n", (outcome, sink.chunks)


def test_a_python_error_reads_like_plain_python(warm):
    code = "import sys\nassert __name__ == '__main__' and sys.argv[0] == __file__\n\ndef f():\n    raise ValueError('boom')\nf()\n"
    outcome, sink = run(warm, code)
    assert outcome.exit_code == 1
    lines = sink.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].endswith('main.py", line 6, in <module>')
    assert lines[-1] == "ValueError: boom"
    assert "boot" not in sink.stderr


def test_python_state_does_not_survive_between_runs(warm):
    run(warm, "import json\nleft_behind = 41\nimport builtins\nbuiltins.planted = 1")
    outcome, sink = run(
        warm,
        "import sys, builtins\nprint('left_behind' in globals(), hasattr(builtins, 'planted'), 'json' in sys.modules)",
    )
    assert sink.stdout == "False False False\n", sink.stderr


class FailingSink(MemorySink):
    def emit(self, stream, text):
        raise RuntimeError("the database went away")


def test_a_failing_sink_does_not_leave_the_run_or_its_container_behind(docker_ready, make_sandbox):
    sandbox = make_sandbox(DockerSandbox, mode="keepalive")
    first, _ = run(sandbox, "print(1)")
    with pytest.raises(RuntimeError):
        run(sandbox, "import time\nprint('x', flush=True)\ntime.sleep(60)", sink=FailingSink())
    assert_container_removed(first.details["container"])
    after, sink = run(sandbox, "print('fresh')")
    assert after.success and sink.stdout == "fresh\n"


PROCESS_FACTS = """
import os, signal, sys
print(os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid())
print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))
print(os.path.realpath('/proc/self/fd/0'), os.getcwd() == os.environ['HOME'] == os.environ['PWD'])
print(open('/proc/self/oom_score_adj').read().strip())
print([int(signal.getsignal(s) == signal.SIG_DFL) for s in  # the runner ignores these
       (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)])
print(sorted(os.environ))
import resource; print(resource.getrlimit(resource.RLIMIT_CPU)[0])
"""


def test_a_prestarted_interpreters_run_is_set_up_as_a_forked_one(warm):
    """Python runs on the interpreter the runner spawned ahead of it (after a pause, it is
    up); bash's is forked for its run: both are session leaders, the OOM killer's first
    choice, with the same environment; the spawned one has stdin on /dev/null, only 0-2
    open, its own work dir, the signals the runner ignores back to default, and the run's
    limits."""
    run(warm, "pass")
    time.sleep(1.0)
    _, python = run(warm, PROCESS_FACTS, cpu_seconds=7)
    facts = python.stdout.splitlines()
    assert facts[:2] == ["True True", "[0, 1, 2, 3]"], python.stdout + python.stderr
    # 3: the listing's own descriptor, as in bash's below
    assert facts[2] == "/dev/null True" and facts[3] == "1000" and facts[4] == "[1, 1, 1]"
    assert facts[6] == "7"
    bash_code = (
        "ps_sid=$(cut -d' ' -f6 /proc/$$/stat); echo $([ \"$ps_sid\" = $$ ] && echo True)\n"
        "cat /proc/$$/oom_score_adj\nenv | cut -d= -f1 | sort | tr '\\n' ' '"
    )
    _, bash = run(warm, bash_code, language="bash")
    said = bash.stdout.splitlines()
    assert said[:2] == ["True", "1000"], bash.stdout + bash.stderr
    python_env = set(eval(facts[5]))  # noqa: S307 - our own probe's printed list
    bash_env = set(said[2].split()) - {"SHLVL", "_", "OLDPWD"}
    assert python_env == bash_env, (python_env, bash_env)


WAITING = """
import os, signal, sys
waiting = [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())
           and b'_airlock_boot' in open(f'/proc/{p}/cmdline', 'rb').read()]
if sys.argv[1:] == ['kill']:
    for pid in waiting:
        os.kill(pid, signal.SIGKILL)
print(len(waiting))
"""


def waiting_interpreters(sandbox, kill: bool = False) -> int:
    """The interpreters waiting for a run in ``sandbox``'s containers (killed, if asked),
    seen from outside the runs: ``docker exec`` as the runs' user."""
    from executions.sandboxes import reaper

    client = docker.from_env()
    found = 0
    mine = {"label": f"{reaper.OWNER_LABEL}={sandbox.owner}"}
    for container in client.api.containers(filters=mine):
        argv = ["python3", "-I", "-S", "-c", WAITING, *(["kill"] if kill else [])]
        said = client.api.exec_start(client.api.exec_create(container["Id"], argv, user="10001"))
        found += int(said.decode().strip() or 0)
    return found


def test_a_dead_prestarted_interpreter_is_replaced(warm):
    assert run(warm, "print(1)")[0].success
    time.sleep(1.0)  # the next run's interpreter has started
    assert waiting_interpreters(warm, kill=True) >= 1
    outcome, sink = run(warm, "import os\nprint(os.getppid())")  # forked afresh by the runner
    assert outcome.success and sink.stdout == "1\n", sink.stderr
    time.sleep(1.0)
    assert waiting_interpreters(warm) >= 1  # and the one after it started again
    assert run(warm, "print(2)")[1].stdout == "2\n"
