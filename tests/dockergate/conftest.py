"""The Docker gate as a real process in front of the real engine.

``gate`` starts ``python -m dockergate`` on a free port for the session, with
the engine's own socket behind it, Docker actions allowed on containers
labelled ``airlock.test=docker-actions`` (the label the Docker action tests'
containers carry) and gVisor's runtime allowed; ``gate_env`` points the docker
SDK (``DOCKER_HOST``) at it for one test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executions.test_docker_actions import client, image, start_container  # noqa: F401
from tests.support import port_open, require, wait_for

from .. import serving

ROOT = Path(__file__).resolve().parents[2]
TARGETS = "label:airlock.test=docker-actions"


class Gate:
    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.log = log
        self.url = f"tcp://127.0.0.1:{port}"

    def logged(self) -> str:
        return self.log.read_text()


@contextlib.contextmanager
def running_gate(log: Path, engine: str, **env: str) -> Iterator[Gate]:
    """``python -m dockergate`` on a free port in front of ``engine``, stopped afterwards."""
    port = serving.free_port()
    env = {**os.environ, "DOCKER_GATE_LISTEN": f"127.0.0.1:{port}", "DOCKER_GATE_ENGINE": engine,
           "LOG_LEVEL": "INFO", **env}  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dockergate"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:
        wait_for(lambda: port_open("127.0.0.1", port) or process.poll() is not None, 15)
        assert process.poll() is None, log.read_text()
        yield Gate(port, log)
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="session")
def gate(tmp_path_factory) -> Iterator[Gate]:
    engine = "/var/run/docker.sock"
    require(os.path.exists(engine), f"no Docker engine socket at {engine}")
    log = tmp_path_factory.mktemp("gate") / "gate.log"
    with running_gate(
        log, engine, DOCKER_GATE_RUNTIMES="runsc", DOCKER_ACTION_CONTAINERS=TARGETS
    ) as gate:
        yield gate


@pytest.fixture
def gate_env(gate: Gate, monkeypatch, settings) -> Gate:
    """The docker SDK of this process talks to the gate; Docker actions allow what it does."""
    from dockergate.targets import Targets

    monkeypatch.setenv("DOCKER_HOST", gate.url)
    settings.DOCKER_ACTION_CONTAINERS = Targets.parse(TARGETS)
    return gate
