"""Long-lived servers confined by the local backend (``executions.sandboxes.local.servers``).

A server program that answers probes on its stdio, as a hostile MCP server
would try them: files its DAC permissions would let it read (so only the
sandbox stands in the way), the host's ports, its caller's environment. Run
for each method this host has; scripts/test runs it again as an ordinary user.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from executions.sandboxes import SandboxUnavailable, ServerSpec, confined_server
from executions.sandboxes.local import method_problems
from tests.support import require

# The system's: a server started by root runs as a uid of its own, which may not reach a
# Python installed under /root.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
PROBES = r"""
import json, os, socket, sys
for line in sys.stdin:
    ask = json.loads(line)
    try:
        if ask["do"] == "read":
            with open(ask["path"], "rb") as f:
                said = "read %d bytes" % len(f.read())
        elif ask["do"] == "write":
            with open(ask["path"], "w") as f:
                said = "wrote %d" % f.write("x")
        elif ask["do"] == "connect":
            socket.create_connection((ask["host"], ask["port"]), timeout=3).close()
            said = "connected"
        elif ask["do"] == "unix":
            s = socket.socket(socket.AF_UNIX)
            s.connect(ask["path"])
            said = "connected"
        elif ask["do"] == "env":
            said = sorted(os.environ)
        else:
            said = os.getcwd()
    except OSError as exc:
        said = "refused: %s" % (exc.strerror or exc)
    print(json.dumps(said), flush=True)
"""


def methods() -> list[str]:
    """unshare and landlock, or those AIRLOCK_TEST_SANDBOXES names (local-unshare, ...)."""
    wanted = os.environ.get("AIRLOCK_TEST_SANDBOXES", "")
    named = [name.removeprefix("local-") for name in wanted.split(",") if name]
    return [m for m in ("unshare", "landlock") if not named or m in named]


@pytest.fixture
def host() -> Iterator[Path]:
    """A place every user may read and write: only the sandbox keeps the server out."""
    root = Path(tempfile.mkdtemp(prefix="airlock-servers-"))
    for name in ("data", "given", "writable", "elsewhere"):
        (root / name).mkdir()
    (root / "data" / "secret_key").write_text("k" * 64)
    (root / "given" / "tool.txt").write_text("its own")
    (root / "elsewhere" / "other.txt").write_text("not its")
    for folder, _, files in os.walk(root):
        os.chmod(folder, 0o777)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o666)
    yield root
    shutil.rmtree(root, ignore_errors=True)


class Server:
    """The probe server started confined; ``ask`` one probe, get its answer."""

    def __init__(self, host: Path, method: str):
        self.spec = ServerSpec(
            name="probes",
            argv=(SYSTEM_PYTHON, "-I", "-S", "-c", PROBES),
            env=(("GIVEN", "yes"),),
            read=(str(host / "given"),),
            write=(str(host / "writable"),),
            hidden=(str(host / "data"),),
        )
        self.confined = confined_server(self.spec, method=method)
        self.process = subprocess.Popen(
            self.confined.argv,
            env=self.confined.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, **probe):
        self.process.stdin.write(json.dumps(probe) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def stop(self) -> int:
        self.process.stdin.close()
        code = self.process.wait(timeout=20)
        self.confined.cleanup()
        return code


@pytest.fixture(params=methods())
def server(request, host, monkeypatch) -> Iterator[Server]:
    problem = method_problems()[request.param]
    require(problem is None, f"local method {request.param}: {problem}")
    monkeypatch.setenv("SECRET_KEY", "the-callers-own")  # what the caller's environment holds
    started = Server(host, request.param)
    yield started
    assert started.stop() == 0


def test_the_server_sees_nothing_of_the_host_but_what_it_was_given(server, host):
    refused = {
        "a hidden data dir's key": server.ask(do="read", path=str(host / "data" / "secret_key")),
        "a folder it was not given": server.ask(
            do="read", path=str(host / "elsewhere" / "other.txt")
        ),
        "the host's passwords": server.ask(do="read", path="/etc/shadow"),
        "a write to what it may only read": server.ask(do="write", path=str(host / "given" / "x")),
        "a write elsewhere": server.ask(do="write", path=str(host / "elsewhere" / "x")),
    }
    assert {what: said for what, said in refused.items() if not said.startswith("refused")} == {}
    assert server.ask(do="read", path=str(host / "given" / "tool.txt")) == "read 7 bytes"
    assert server.ask(do="write", path=str(host / "writable" / "out")) == "wrote 1"
    assert (host / "writable" / "out").read_text() == "x"
    assert server.ask(do="write", path="scratch") == "wrote 1"  # its own working dir


def test_the_server_reaches_no_port_and_no_socket_of_the_host(server, host):
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        assert server.ask(do="connect", host="127.0.0.1", port=port).startswith("refused")
    assert server.ask(do="connect", host="1.1.1.1", port=53).startswith("refused")
    path = str(host / "elsewhere" / "control.sock")  # a control socket of the host
    with socket.socket(socket.AF_UNIX) as unix:
        unix.bind(path)
        unix.listen()
        os.chmod(path, 0o777)
        assert server.ask(do="unix", path=path).startswith("refused")


def test_the_server_gets_its_own_environment_only(server):
    assert server.ask(do="env") == ["GIVEN", "HOME", "LANG", "PATH", "TMPDIR"]


def test_a_path_that_would_show_a_hidden_one_is_refused(host):
    for method in methods():
        if method_problems()[method]:
            continue
        for unsafe in (str(host), str(host / "data"), str(host / "data" / "inner")):
            spec = ServerSpec(
                name="x",
                argv=(SYSTEM_PYTHON, "-c", "pass"),
                read=(unsafe,),
                hidden=(str(host / "data"),),
            )
            with pytest.raises(SandboxUnavailable, match="would show the server"):
                confined_server(spec, method=method)
