"""``manage.py mcp-stdio``: the SDK's stdio client launches the bridge as a desktop client would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.mcp.conftest import ONE_REVIEWER, Progress, innermost, text_of
from tests.serving import ROOT


def bridge_command(served, token: str, url: str | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(ROOT / "manage.py"), "mcp-stdio", "--url", url or served.server.base],
        env={
            "AIRLOCK_TOKEN": token,
            "AIRLOCK_DATA_DIR": str(served.data),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
        cwd=str(ROOT),
    )


@contextlib.asynccontextmanager
async def launch(served, token: str, errlog: Path, mode: str = "legacy") -> AsyncIterator[Client]:
    """The bridge, launched by the SDK's stdio client (desktop clients use the handshake)."""
    with errlog.open("w") as log:
        transport = stdio_client(bridge_command(served, token), errlog=log)
        async with Client(transport, mode=mode) as client:
            yield client


async def test_the_bridge_lists_the_tokens_tools_and_runs_a_script(served, tmp_path):
    progress = Progress()
    async with launch(served, served.server.token, tmp_path / "bridge.log", "auto") as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool(
            "script_execute",
            {"language": "python", "code": "print(6 * 7)"},
            progress_callback=progress,
        )
    assert {"script_execute", "get_proposal"} <= tools
    assert "host_exec" not in tools
    assert result.is_error is False, text_of(result)
    assert result.structured_content["execution"]["stdout"] == "42\n"
    assert "".join(progress.messages[1:]) == "42\n"


async def test_the_bridge_passes_on_progress_while_a_reviewer_decides(served, tmp_path):
    reviewer = served.user_token("reviewer")
    progress = Progress()
    async with launch(served, served.server.token, tmp_path / "bridge.log") as client:
        call = asyncio.create_task(
            client.call_tool(
                "script_execute",
                {"language": "python", "code": ONE_REVIEWER},
                progress_callback=progress,
            )
        )
        pk = int((await progress.wait_for(r"proposal (\d+): pending review")).group(1))
        await asyncio.to_thread(served.decide, pk, "approve", reviewer)
        result = await asyncio.wait_for(call, 60)
    assert result.structured_content["execution"]["stdout"] == "line 0\nline 1\nline 2\n"
    # Output arrives in the chunks the sandbox read, not necessarily whole lines.
    approved = next(i for i, m in enumerate(progress.messages) if m.startswith("approved by"))
    assert "".join(progress.messages[approved + 1 :]) == "line 0\nline 1\nline 2\n"


async def test_the_bridge_answers_bad_arguments_with_a_tool_error(served, tmp_path):
    async with launch(served, served.server.token, tmp_path / "bridge.log") as client:
        result = await client.call_tool("script_execute", {"language": "python", "code": ""})
    assert result.is_error is True
    assert "invalid arguments: code: This field may not be blank." in text_of(result)


async def test_the_bridge_refuses_to_start_with_a_revoked_token(served, tmp_path):
    token = served.new_agent("bridge-revoked", "script.execute")
    served.deactivate_agent("bridge-revoked")
    errlog = tmp_path / "bridge.log"
    with pytest.raises(Exception) as refused:  # noqa: B017 - the SDK wraps it in task groups
        async with launch(served, token, errlog) as client:
            await client.list_tools()
    assert isinstance(innermost(refused.value), MCPError)  # the bridge exited
    assert f"{served.url} refused: invalid or revoked token" in errlog.read_text()


async def test_the_bridge_needs_a_token_and_an_http_url(served, tmp_path):
    no_token = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "mcp-stdio",
        "--url",
        served.server.base,
        cwd=ROOT,
        env={**os.environ, "AIRLOCK_TOKEN": "", "AIRLOCK_DATA_DIR": str(served.data)},
        stdin=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await no_token.communicate()
    assert no_token.returncode == 1
    assert b"set AIRLOCK_TOKEN to the agent's token" in stderr
    bad_url = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "mcp-stdio",
        "--url",
        "ftp://example",
        cwd=ROOT,
        env={**os.environ, "AIRLOCK_TOKEN": "x", "AIRLOCK_DATA_DIR": str(served.data)},
        stdin=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await bad_url.communicate()
    assert bad_url.returncode == 1
    assert b"give an http:// or https:// URL of Airlock" in stderr
