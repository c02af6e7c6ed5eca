"""The SDK's framework adapters (``airlock_sdk.langgraph``, ``.openai_agents``,
``.pydantic_ai``), each run with the framework's real package against a running ``serve``.

The frameworks live in a venv of their own, ``.venv-frameworks`` (scripts/test makes it:
``pip install "./sdk[langgraph,openai-agents,pydantic-ai]"``), as an agent builder's
project would hold them: their pins are not Airlock's. Each test runs a program there
(most often its framework page's example, ``docs/guides/frameworks/``), with
``AIRLOCK_URL`` and ``AIRLOCK_TOKEN`` set, while a reviewer decides through the API.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.serving import ROOT, agent_token, start_server, user_token
from tests.support import require

FRAMEWORKS_PYTHON = ROOT / ".venv-frameworks" / "bin" / "python"
PAGES = ROOT / "docs" / "guides" / "frameworks"


@pytest.fixture(scope="module")
def frameworks_python() -> Path:
    require(
        FRAMEWORKS_PYTHON.exists(),
        "the framework adapters' tests need .venv-frameworks (scripts/test makes it)",
    )
    return FRAMEWORKS_PYTHON


@pytest.fixture(scope="module")
def deployment(frameworks_python, tmp_path_factory):
    """A running serve; ``.reviewer``: a reviewer's token; ``.agent_token``: an agent that
    may propose any tool call and scripts."""
    data_dir = tmp_path_factory.mktemp("frameworks") / "data"
    server = start_server(data_dir)
    server.data_dir = data_dir
    server.reviewer = user_token(data_dir, "reviewer")
    server.agent_token = agent_token(data_dir, "framework-agent", "script.execute", "tool.call:*")
    yield server
    server.stop()


def example(page: str, index: int = 0) -> str:
    """The ``index``-th ```python block of ``docs/guides/frameworks/<page>.md``."""
    blocks = re.findall(r"^```python\n(.*?)^```", (PAGES / page).read_text(), re.M | re.S)
    assert len(blocks) > index, f"{page} has {len(blocks)} python examples"
    return blocks[index]


def run_program(
    deployment, code: str, *, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``code`` run by the frameworks' Python as the deployment's agent; fails with its output
    if it exits non-zero."""
    done = subprocess.run(
        [str(FRAMEWORKS_PYTHON), "-c", code],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC"))},
            "AIRLOCK_URL": deployment.base,
            "AIRLOCK_TOKEN": deployment.agent_token,
            # No model is reached: each test gives its framework a model that needs no network.
            "OPENAI_API_KEY": "sk-not-used",  # pragma: allowlist secret
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done
