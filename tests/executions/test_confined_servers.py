"""Long-lived servers confined by the local backend (``executions.sandboxes.local.servers``).

A server program that answers probes on its stdio, as a hostile MCP server
would try them: files its DAC permissions would let it read (so only the
sandbox stands in the way), the host's ports, its caller's environment. Run
for each method this host has; scripts/test runs it again as an ordinary user.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from executions.sandboxes import SandboxUnavailable, ServerSpec, confined_server
from executions.sandboxes.egress import Egress, parse
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
        elif ask["do"] == "tunnel":  # CONNECT through the proxy its environment names
            proxy = os.environ["HTTPS_PROXY"].rpartition("/")[2].rpartition(":")
            s = socket.create_connection((proxy[0], int(proxy[2])), timeout=5)
            s.sendall(("CONNECT %s HTTP/1.1\r\n\r\n" % ask["target"]).encode())
            head = s.recv(4096).decode()
            said = head.split("\r\n")[0]
            if " 200 " in said:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                said += " | " + s.recv(4096).decode().split("\r\n")[0]
            else:
                said += " | " + head.partition("\r\n\r\n")[2].strip()
        elif ask["do"] == "listen":
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            said = "listening"
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

    def __init__(self, host: Path, method: str, network: tuple[str, ...] = ()):
        self.spec = ServerSpec(
            name="probes",
            argv=(SYSTEM_PYTHON, "-I", "-S", "-c", PROBES),
            env=(("GIVEN", "a-token-4f1d"),),
            read=(str(host / "given"),),
            write=(str(host / "writable"),),
            hidden=(str(host / "data"),),
            network=network,
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
    # Its values (tokens) are on no command line, which every user of the host may read.
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                assert b"a-token-4f1d" not in cmdline.read(), pid


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


# --- a network list: the listed hosts through its proxy, nothing else ----------------


@pytest.fixture
def web() -> Iterator[int]:
    """A plain HTTP server on the host's loopback (where Airlock's own ports are too)."""
    handler = type("Quiet", (http.server.BaseHTTPRequestHandler,), {
        "do_GET": lambda self: (self.send_response(204), self.end_headers()),
        "log_message": lambda self, *args: None,
    })  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("method", [m for m in methods() if m == "unshare"])
def test_a_server_reaches_the_hosts_its_network_lists_and_nothing_else(host, web, method):
    problem = method_problems()[method]
    require(problem is None, f"local method {method}: {problem}")
    with socket.create_server(("127.0.0.1", 0)) as unlisted:
        airlock = unlisted.getsockname()[1]  # as Airlock's port would be: on the same host
        listed = (f"127.0.0.1:{web}", f"localhost:{airlock}", "*.example.invalid:443")
        server = Server(host, method, network=listed)
        try:
            assert server.ask(do="tunnel", target=f"127.0.0.1:{web}") == (
                "HTTP/1.1 200 Connection established | HTTP/1.0 204 No Content"
            )
            refused = {
                "a port not listed": server.ask(do="tunnel", target=f"127.0.0.1:{airlock}"),
                "a listed name that is the host": server.ask(
                    do="tunnel", target=f"localhost:{airlock}"
                ),
                "the name a wildcard stands under": server.ask(
                    do="tunnel", target="example.invalid:443"
                ),
            }
            assert refused["a port not listed"] == (
                f"HTTP/1.1 403 Forbidden | airlock: 127.0.0.1:{airlock} is not in this "
                "server's network list"
            )
            assert (
                "resolves to 127.0.0.1, an address of the host itself"
                in (refused["a listed name that is the host"])
            )
            assert refused["the name a wildcard stands under"].startswith("HTTP/1.1 403")
            around = {
                "a listed port, not through the proxy": server.ask(
                    do="connect", host="127.0.0.1", port=web
                ),
                "Airlock's port": server.ask(do="connect", host="127.0.0.1", port=airlock),
                "an outside address": server.ask(do="connect", host="1.1.1.1", port=53),
                "a port of its own": server.ask(do="listen"),
                "the proxy's handover socket": server.ask(do="unix", path="/.egress.sock"),
            }
            assert {what: said for what, said in around.items() if "refused" not in said} == {}
            assert "HTTPS_PROXY" in server.ask(do="env")
        finally:
            assert server.stop() == 0
    assert not list(Path(tempfile.gettempdir()).glob(f"airlock-sandbox-{os.getpid()}-egress-*"))


@pytest.mark.parametrize("method", [m for m in methods() if m == "landlock"])
def test_without_a_network_of_its_own_a_network_list_is_refused(method):
    spec = ServerSpec(name="x", argv=(SYSTEM_PYTHON, "-c", "pass"), network=("a.example:443",))
    with pytest.raises(SandboxUnavailable, match="needs a network of its own"):
        confined_server(spec, method=method)


@pytest.mark.parametrize(
    "entry, why",
    [
        ("api.github.com", "is not host:port"),
        ("api.github.com:0", "from 1 to 65535"),
        ("api.github.com:https", "from 1 to 65535"),
        ("-bad-.example:443", "neither a host name nor an address"),
        ("::1:443", "is not host:port"),
        ("http://api.github.com:443", "is not host:port"),
        ("[::1]:443x", "from 1 to 65535"),
    ],
)
def test_a_network_entry_that_is_not_host_port_is_refused_by_name(entry, why):
    spec = ServerSpec(name="x", argv=(SYSTEM_PYTHON, "-c", "pass"), network=(entry,))
    with pytest.raises(SandboxUnavailable, match=f"network: .*{why}"):
        confined_server(spec, method="unshare")  # refused before anything is started


def test_the_proxy_answers_a_request_it_cannot_read_with_a_400_and_stays_up():
    """Egress on its own: the listening socket handed over as a supervisor would."""
    proxy = Egress(
        "direct", (parse("127.0.0.1:9"),), prefix=f"airlock-sandbox-{os.getpid()}-egress-"
    )
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        with socket.socket(socket.AF_UNIX) as handover:
            handover.connect(proxy.socket_path)
            socket.send_fds(handover, [b"L"], [listener.fileno()])
            assert handover.recv(1) == b"k"
        address = listener.getsockname()
        for asked, status in [
            (b"CONNECT evil.com\x00.example.com:443 HTTP/1.1", b"400"),
            (b"CONNECT *.example.com:443 HTTP/1.1", b"400"),
            (b"CONNECT 127.0.0.1:9x HTTP/1.1", b"400"),
            (b"GET http://127.0.0.1:9/ HTTP/1.1", b"405"),
            (b"CONNECT 127.0.0.2:9 HTTP/1.1", b"403"),
        ]:
            with socket.create_connection(address, timeout=5) as client:
                client.sendall(asked + b"\r\n\r\n")
                assert client.recv(4096).split(b" ")[1] == status, asked
        again = socket.socket(socket.AF_UNIX)
        with again, pytest.raises(OSError):  # handed over once: closed after
            again.connect(proxy.socket_path)
    finally:
        proxy.close()
        listener.close()
