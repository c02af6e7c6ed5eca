"""MCP tests: the official SDK's client (and the inspector's CLI) against a real ``serve``.

One deployment for the package (``manage.py serve --demo``: several web
processes on one port, a worker, beat); each test connects with its own client.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.serving import Server, manage, start_server


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the end of the server's log to the report."""
    report = yield
    for running in item.funcargs.values():
        if report.failed and isinstance(running, Served):
            tail = running.server.log.read_text(errors="replace")[-6000:]
            report.sections.append(("airlock server", tail))
    return report


@dataclass
class Served:
    """A running deployment and its data dir (for management commands)."""

    server: Server
    data: Path
    env: dict[str, str] = field(default_factory=dict)  # the deployment's DATABASE_URL and such

    @property
    def url(self) -> str:
        return self.server.base + "/mcp"

    def manage(self, *args: str) -> str:
        """Run a management command on the deployment's data; its stdout."""
        return manage(self.data, *args, env=self.env)

    def user_token(self, username: str) -> str:
        return self.manage("create_user_token", username).split()[-1]

    def new_agent(self, name: str, *capabilities: str) -> str:
        """A new agent's token."""
        args = [arg for capability in capabilities for arg in ("--capability", capability)]
        return self.manage("create_agent", name, *args).split()[-1]

    def deactivate_agent(self, name: str) -> None:
        self.manage(
            "shell",
            "-c",
            "from approvals.models import Agent; from approvals.core.tokens import set_agent_active; "
            f"set_agent_active(Agent.objects.get(name={name!r}), False, 'system')",
        )

    def decide(self, proposal_id: int, kind: str, token: str, comment: str = "") -> dict:
        status, body = self.server.api(
            "POST", f"/api/v1/proposals/{proposal_id}/{kind}", {"comment": comment}, token=token
        )
        assert status == 200, body
        return body


@pytest.fixture(scope="package")
def served(tmp_path_factory) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("airlock") / "data"
    # Reviewers decide with their tokens here: an install that turned step-up off.
    server = start_server(data, extra_env={"STEP_UP_MIN_RISK": "11"})
    yield Served(server, data)
    server.stop()


@contextlib.asynccontextmanager
async def connect(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP, with a bearer token."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120)
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


@dataclass
class Progress:
    """Progress notifications a call received, in order."""

    messages: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    async def __call__(self, value: float, total: float | None, message: str | None) -> None:
        self.values.append(value)
        self.messages.append(message or "")

    async def wait_for(self, pattern: str, timeout: float = 30) -> re.Match:
        """The first message matching ``pattern``, once it has arrived."""
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            for message in self.messages:
                if found := re.search(pattern, message):
                    return found
            await asyncio.sleep(0.05)
        raise AssertionError(f"no progress message matched {pattern!r}: {self.messages}")


def innermost(error: BaseException) -> BaseException:
    """What went wrong inside the task groups the SDK wraps errors in."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


SLOW_OUTPUT = (
    "import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.4)\n"
)
# Imports the risk scorer weighs: os (risk 6) needs one reviewer, ctypes (8) two.
ONE_REVIEWER = "import os\n" + SLOW_OUTPUT
TWO_REVIEWERS = "import ctypes\n" + SLOW_OUTPUT
