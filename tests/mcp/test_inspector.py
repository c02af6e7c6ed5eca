"""A client no one here wrote: the MCP inspector's CLI (npm), over streamable HTTP.

``scripts/test`` installs ``@modelcontextprotocol/inspector-cli`` into
``.npm-tools``; without it (or Node.js) the test skips, and fails under CI=true.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.serving import ROOT
from tests.support import require

PACKAGE = ROOT / ".npm-tools" / "node_modules" / "@modelcontextprotocol" / "inspector-cli"
CLI = ROOT / ".npm-tools" / "node_modules" / ".bin" / "mcp-inspector-cli"


@pytest.fixture(scope="module")
def inspector():
    require(CLI.exists(), f"the MCP inspector CLI is not installed at {CLI} (scripts/test does it)")

    def run(served, token: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(CLI), "--cli", served.url, "--transport", "http"]
            + ["--header", f"Authorization: Bearer {token}", *args],
            # The CLI finds its own package.json as ../package.json of the working directory.
            cwd=PACKAGE / "build",
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def test_the_inspector_lists_and_calls_the_tools(served, inspector):
    listed = inspector(served, served.server.token, "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    tools = {tool["name"]: tool for tool in json.loads(listed.stdout)["tools"]}
    assert "script_execute" in tools
    assert "host_exec" not in tools
    assert tools["script_execute"]["inputSchema"]["required"] == ["language", "code"]

    called = inspector(
        served,
        served.server.token,
        *("--method", "tools/call", "--tool-name", "script_execute"),
        *("--tool-arg", "language=python", "code=print(6 * 7)", "reason=inspector"),
    )
    assert called.returncode == 0, called.stderr
    result = json.loads(called.stdout)
    assert result.get("isError", False) is False
    assert result["structuredContent"]["execution"]["stdout"] == "42\n"
    assert "stdout:\n42" in result["content"][0]["text"]


def test_the_inspector_gets_tool_errors_and_a_refused_token(served, inspector):
    bad = inspector(
        served,
        served.server.token,
        *("--method", "tools/call", "--tool-name", "script_execute"),
        *("--tool-arg", "language=cobol", "code=print(1)"),
    )
    assert bad.returncode == 0, bad.stderr
    result = json.loads(bad.stdout)
    assert result["isError"] is True
    assert 'language: "cobol" is not a valid choice.' in result["content"][0]["text"]

    refused = inspector(served, "alk_not-a-token", "--method", "tools/list")
    assert refused.returncode == 1
    assert "invalid or revoked token" in refused.stderr
