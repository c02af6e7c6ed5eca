"""Real receivers for the audit sinks, started by the tests: rsyslog, and an HTTP receiver process.

Both run as processes of their own on a local port and can be stopped and
started again on the same port (a sink that goes down and comes back).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.standins import free_port

ROOT = Path(__file__).resolve().parents[2]
RSYSLOGD = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
BOM = "\ufeff"


def _wait_for_port(port: int, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


class _Process:
    port: int
    process: subprocess.Popen | None = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


class Rsyslog(_Process):
    """rsyslogd from Debian in the foreground, its own config: TCP (or TLS) in, raw messages out."""

    def __init__(self, directory: Path, tls: dict | None = None):
        self.directory = directory
        self.port = free_port()
        self.out = directory / "received.log"
        self.tls = tls  # {"ca": path, "cert": path, "key": path}
        directory.mkdir(parents=True, exist_ok=True)

    def _config(self) -> str:
        work = f'workDirectory="{self.directory}"'
        module = 'module(load="imtcp")'
        if self.tls:
            work += (
                f' DefaultNetstreamDriverCAFile="{self.tls["ca"]}"'
                f' DefaultNetstreamDriverCertFile="{self.tls["cert"]}"'
                f' DefaultNetstreamDriverKeyFile="{self.tls["key"]}"'
            )
            module = (
                'module(load="imtcp" StreamDriver.Name="gtls" StreamDriver.Mode="1" '
                'StreamDriver.AuthMode="anon")'
            )
        return "\n".join(
            [
                f"global({work})",
                module,
                f'input(type="imtcp" port="{self.port}")',
                'template(name="raw" type="string" string="%rawmsg%\\n")',
                f'*.* action(type="omfile" file="{self.out}" template="raw")',
                "",
            ]
        )

    def start(self) -> None:
        config = self.directory / "rsyslog.conf"
        config.write_text(self._config())
        self.process = subprocess.Popen(
            [RSYSLOGD, "-n", "-f", str(config), "-i", str(self.directory / "pid")],
            stdout=subprocess.DEVNULL,
            stderr=(self.directory / "stderr").open("a"),
        )
        _wait_for_port(self.port, self.process, "rsyslogd")

    def messages(self) -> list[str]:
        return self.out.read_text().splitlines() if self.out.exists() else []

    def entries(self) -> list[dict]:
        """The JSON entries received, in the order rsyslog wrote them."""
        return [json.loads(line.split(BOM, 1)[1]) for line in self.messages()]


class HttpReceiver(_Process):
    """``tests.audit.http_receiver`` as a process: every POST kept, the first N refused if asked."""

    def __init__(self, directory: Path, refuse: int = 0):
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.out = directory / "posts.jsonl"
        self.refuse = refuse

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.audit.http_receiver", str(self.port), str(self.out)]
            + ["--refuse", str(self.refuse)],
            cwd=ROOT,
        )
        _wait_for_port(self.port, self.process, "the HTTP receiver")

    def posts(self) -> list[dict]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines()]

    def entries(self) -> list[dict]:
        """The entries of every accepted post, in order (a HEC event's own entry)."""
        found = []
        for post in self.posts():
            if post["refused"]:
                continue
            for line in post["body"].splitlines():
                item = json.loads(line)
                found.append(item.get("event", item) if "sourcetype" in item else item)
        return found


def wait_for(read, count: int, timeout: float = 10.0) -> list:
    """``read()`` once it returns at least ``count`` items (rsyslog writes asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        found = read()
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)
