"""Scripts in container sandboxes on the compose deployment, started through the Docker gate.

The workers hold no Docker socket: they reach the engine through the gate
(``dockergate``), which starts sandbox containers and nothing else. Each probe
of the embedded suites is tried here as code an agent proposed and a reviewer
approved, on the ``docker`` backend (the suite's default) and on ``gvisor``
(the workers made again with ``SANDBOX_BACKEND=gvisor``): no network to the
stack or out, no host or worker files, no secrets, no process left for the next
run. From inside a worker, the calls code that escaped into it would try
against the gate are refused. A worker killed while its sandbox runs leaves no
container behind.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap

import pytest

from .stack import Agent, Stack, wait_for

PROBE = r"""
import json, os, socket
net = {}
for host, port in [("postgres", 5432), ("redis", 6379), ("dockergate", 2375), ("web", 8000),
                   ("proxy", 8000), ("1.1.1.1", 53), ("172.17.0.1", 2375), ("169.254.169.254", 80)]:
    try:
        socket.create_connection((host, port), 2).close()
        net[f"{host}:{port}"] = "open"
    except OSError as exc:
        net[f"{host}:{port}"] = type(exc).__name__
files = {}
for path in ["/etc/shadow", "/var/run/docker.sock", "/run/docker.sock", "/app/manage.py",
             "/var/lib/airlock", "/proc/1/environ"]:
    try:
        with open(path, "rb") as handle:
            files[path] = handle.read(4096).decode(errors="replace")
    except OSError as exc:
        files[path] = type(exc).__name__
print(json.dumps({"net": net, "files": files, "uid": os.getuid(), "env": sorted(os.environ)}))
"""

DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open('/tmp/left-behind', 'w').write('x')
        time.sleep(300)
    os._exit(0)
os.wait()
print('forked', flush=True)
"""

SURVEY = """
import os
me = os.getpid()
others = []
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) not in (1, me, os.getppid()):
        try:
            others.append(open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\\0', b' ').decode())
        except OSError:
            pass
print(sorted(others), os.path.exists('/tmp/left-behind'))
"""

SECRETS = ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "DOCKER_HOST", "AWS_SECRET_ACCESS_KEY")


@pytest.fixture(scope="module", params=["docker", "gvisor"])
def backend(request, stack: Stack) -> str:
    """The workers on this backend for the module's tests (the suite's default is docker)."""
    if request.param != stack.env["SANDBOX_BACKEND"]:
        stack.set_workers(SANDBOX_BACKEND=request.param)
    yield request.param
    if stack.env["SANDBOX_BACKEND"] != "docker":
        stack.set_workers(SANDBOX_BACKEND="docker")


def approved_run(agent: Agent, reviewers: list[Agent], code: str, timeout: float = 90) -> dict:
    """The finished execution of ``code``, approved by as many reviewers as the policy wants."""
    proposal = agent.script(code)
    for reviewer in reviewers:
        if proposal["status"] != "pending":
            break
        proposal = reviewer.approve(proposal["id"])
    assert proposal["status"] == "approved", proposal
    return agent.wait_execution(proposal["execution_id"], timeout=timeout)


def test_a_script_runs_in_a_container_of_the_backend(backend, agent: Agent, reviewers: list[Agent]):
    ran = approved_run(agent, reviewers, "print(sum(range(10)))")
    assert (ran["status"], ran["stdout"]) == ("succeeded", "45\n"), ran
    details = ran["provenance"]["details"]
    assert ran["provenance"]["backend"] == backend
    assert details["isolation"] == ("gvisor" if backend == "gvisor" else "container")
    assert details["runtime"] == ("runsc" if backend == "gvisor" else "runc")


def test_the_sandbox_reaches_no_network_no_host_file_and_no_secret(
    backend, agent: Agent, reviewers: list[Agent]
):
    ran = approved_run(agent, reviewers, PROBE)
    assert ran["status"] == "succeeded", ran
    seen = json.loads(ran["stdout"])
    assert [target for target, result in seen["net"].items() if result == "open"] == []
    files = seen["files"]
    assert files["/etc/shadow"] in ("PermissionError", "FileNotFoundError")
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/app/manage.py", "/var/lib/airlock"):
        assert files[path] in ("FileNotFoundError", "PermissionError"), (path, files[path])
    assert not any(secret in files["/proc/1/environ"] for secret in SECRETS)
    assert seen["uid"] != 0
    assert not set(SECRETS) & set(seen["env"])


def test_no_process_or_file_is_left_for_the_next_run(
    stack: Stack, backend, agent: Agent, reviewers: list[Agent]
):
    daemon = approved_run(agent, reviewers, DAEMON)
    assert (daemon["status"], daemon["stdout"]) == ("succeeded", "forked\n"), daemon
    container = daemon["provenance"]["details"]["container"]
    for _ in range(15):
        if not any(cid.startswith(container) for cid in stack.sandboxes()):
            return  # recycled rather than reused: nothing of it is left either
        survey = approved_run(agent, reviewers, SURVEY)
        if survey["provenance"]["details"]["container"] == container:
            assert survey["stdout"] == "[] False\n", survey
            assert survey["provenance"]["details"]["container_run"] > 1
            return
    pytest.fail(f"no later run landed in container {container}")


FORBIDDEN = r"""
import json, os, sys, urllib.error, urllib.request

def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request("http://dockergate:2375/v1.41" + path, data=data,
                                     method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return [response.status, response.read().decode(errors="replace")]
    except urllib.error.HTTPError as error:
        return [error.code, error.read().decode(errors="replace")[:500]]

def sandbox(**host):
    config = {"Memory": 64 << 20, "MemorySwap": 64 << 20, "NanoCpus": 10**9, "PidsLimit": 16,
              "ReadonlyRootfs": True, "NetworkMode": "none", "CapDrop": ["ALL"],
              "SecurityOpt": ["no-new-privileges"], "AutoRemove": True}
    config.update(host)
    return {"Image": "airlock-sandbox:latest", "Cmd": ["python3", "-I", "-S", "-c", "1"],
            "User": "10001:10001", "Labels": {"airlock.sandbox": "1"}, "HostConfig": config}

postgres, neighbours = sys.argv[1], sys.argv[2]
listed = call("GET", "/containers/json?all=1")
print(json.dumps({
    "listed": [listed[0], [sorted(c["Labels"]) for c in json.loads(listed[1])]],
    "ping": call("GET", "/_ping"),
    "privileged": call("POST", "/containers/create", sandbox(Privileged=True)),
    "bind": call("POST", "/containers/create", sandbox(Binds=["/:/host"])),
    "stack-network": call("POST", "/containers/create", sandbox(NetworkMode=os.environ["NETWORK"])),
    "exec": call("POST", f"/containers/{postgres}/exec", {"Cmd": ["psql", "-c", "select 1"]}),
    "stop-postgres": call("POST", f"/containers/{postgres}/stop"),
    "info": call("GET", "/info"),
    "attach-neighbour": call("POST", f"/containers/{neighbours}/attach?stream=1&stdin=1"),
    "remove-neighbour": call("DELETE", f"/containers/{neighbours}?force=1"),
    "images": call("GET", "/images/json"),
    "socket": os.path.exists("/var/run/docker.sock"),
}))
"""


def test_forbidden_docker_calls_from_inside_a_worker_are_refused(stack: Stack, agent: Agent):
    postgres = stack.container("postgres")
    neighbours = wait_for(
        lambda: (
            [cid for cid, owner in stack.sandboxes().items() if not owner.startswith("host-a:")]
            or agent.script("print('warm another host')")
            and None
        ),
        120,
        "a sandbox of another worker",
        interval=1,
    )[0]
    out = stack.docker(
        "exec", "-e", f"NETWORK={stack.project}_default", stack.worker("host-a"),
        "python", "-c", textwrap.dedent(FORBIDDEN), postgres, neighbours,
    )  # fmt: skip
    seen = json.loads(out)
    assert seen["ping"][0] == 200  # the gate answers: what follows is refused, not unreachable
    assert seen["socket"] is False
    for call, why in [
        ("privileged", "HostConfig.Privileged"),
        ("bind", "HostConfig.Binds"),
        ("stack-network", "HostConfig.NetworkMode"),
        ("exec", "does not exec"),
        ("stop-postgres", "not one Airlock may act on"),
        ("info", "not a call Airlock makes"),
        ("attach-neighbour", "another client started it"),
        ("remove-neighbour", "another client started it"),
        ("images", "not a call Airlock makes"),
    ]:
        status, body = seen[call]
        assert status == 403 and why in json.loads(body)["message"], (call, status, body)
    status, labels = seen["listed"]
    assert status == 200 and all("airlock.sandbox" in each for each in labels), labels
    assert stack.state(postgres) == "running"
    assert neighbours in stack.sandboxes()  # the other worker's sandbox is still there


def test_a_worker_killed_while_its_sandbox_runs_leaves_no_container(stack: Stack, agent: Agent):
    proposal = agent.script(
        "import time\nprint('started', flush=True)\ntime.sleep(120)", timeout_seconds=200
    )
    running = wait_for(
        lambda: (
            (e := agent.execution(proposal["execution_id"]))["status"] == "running"
            and e["stdout"] == "started\n"
            and e
        ),
        90,
        "the sleeper to run and print",
    )
    host = running["provenance"]["worker_host"]
    theirs = stack.sandboxes(f"{host}:")
    assert theirs, f"no sandbox container of {host}'s worker"

    os.kill(stack.main_pid(stack.worker(host)), signal.SIGKILL)

    wait_for(lambda: not set(theirs) & set(stack.sandboxes()), 30, f"{host}'s sandboxes to go")
    lost = agent.wait_execution(proposal["execution_id"], timeout=90)
    assert lost["status"] == "lost", lost
    wait_for(lambda: stack.state(stack.worker(host)) == "running", 60, f"{host} to restart")
