"""``airlock hook claude-code``: Claude Code's hook payloads in, decisions out, against a real serve.

The payloads are the ones Claude Code documents for its command hooks (a
Bash command, a file edit, an MCP tool; PreToolUse, then PostToolUse); the
reviewer decides over the API while the hook waits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.serving import agent_token, decide_when_pending, manage, start_server, user_token

AIRLOCK = Path(sys.executable).with_name("airlock")


def event(tool_name: str, tool_input: dict, use_id: str, name: str = "PreToolUse", **extra):
    return {
        "session_id": "9f0c2a51-5d3e-4d7e-9a57-1c0f1b2e3d4a",
        "transcript_path": "/home/dev/.claude/projects/-home-dev-web/9f0c2a51.jsonl",
        "cwd": "/home/dev/web",
        "permission_mode": "default",
        "hook_event_name": name,
        "tool_name": tool_name,
        "tool_input": tool_input,
        "tool_use_id": use_id,
        **extra,
    }


BASH = ("Bash", {"command": "npm test -- --runInBand", "description": "Run the tests"})
EDIT = ("Edit", {"file_path": "/home/dev/web/src/config.ts", "old_string": "retries: 1",
                 "new_string": "retries: 3", "replace_all": False})  # fmt: skip
MCP = ("mcp__github__create_issue", {"owner": "acme", "repo": "web", "title": "Flaky test"})


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("hooks") / "data"
    server = start_server(data_dir)
    server.data_dir = data_dir
    server.reviewer = user_token(data_dir, "reviewer")
    server.agent_token = agent_token(
        data_dir, "claude-dev", "tool.call:claude-code.Bash", "tool.call:claude-code.Edit"
    )
    yield server
    server.stop()


def hook(deployment, payload, *args: str, token: str | None = None, timeout: float = 60):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env.update(AIRLOCK_URL=deployment.base, AIRLOCK_TOKEN=token or deployment.agent_token)
    if token == "":
        env.pop("AIRLOCK_TOKEN")
    result = subprocess.run(
        [str(AIRLOCK), "hook", "claude-code", *args],
        input=payload if isinstance(payload, str) else json.dumps(payload),
        env={**env, "XDG_CONFIG_HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["hookSpecificOutput"] if result.stdout.strip() else None


def test_an_approved_bash_command_is_allowed_then_its_outcome_reported(deployment):
    reviewer = decide_when_pending(deployment, "claude-code.Bash", "approve", "tests are fine")
    answer = hook(deployment, event(*BASH, "toolu_01Bash"))
    reviewer.join()
    assert answer == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": "Airlock: approved (reviewer: tests are fine)",
    }
    # Claude Code asks the hook again for the same call (a retry): the same proposal.
    assert hook(deployment, event(*BASH, "toolu_01Bash"))["permissionDecision"] == "allow"
    _, page = deployment.api(
        "GET", "/api/v1/proposals?action=tool.call&q=Claude+Code", token=deployment.reviewer
    )
    bash = [p for p in page["items"] if p["parameters"]["tool"] == "claude-code.Bash"]
    assert len(bash) == 1
    assert bash[0]["parameters"]["arguments"] == BASH[1]
    assert bash[0]["reason"] == "Claude Code in /home/dev/web"
    response = {"stdout": "Tests: 42 passed", "stderr": "", "interrupted": False}
    after = event(*BASH, "toolu_01Bash", "PostToolUse", tool_response=response)
    assert hook(deployment, after) is None
    _, execution = deployment.api(
        "GET", f"/api/v1/executions/{bash[0]['execution_id']}", token=deployment.reviewer
    )
    assert (execution["status"], execution["backend"]) == ("succeeded", "agent")
    assert json.loads(execution["stdout"]) == response


def test_a_rejected_edit_is_denied_with_the_reviewers_reason(deployment):
    reviewer = decide_when_pending(deployment, "claude-code.Edit", "reject", "not that file")
    answer = hook(deployment, event(*EDIT, "toolu_02Edit"))
    reviewer.join()
    assert answer["permissionDecision"] == "deny"
    assert answer["permissionDecisionReason"] == "Airlock: rejected: reviewer: not that file"


def test_an_mcp_tool_beyond_the_agents_capabilities_is_denied_at_once(deployment):
    answer = hook(deployment, event(*MCP, "toolu_03Mcp"))
    assert answer["permissionDecision"] == "deny"
    assert answer["permissionDecisionReason"] == (
        "Airlock: denied: the agent has no capability for tool.call on tool "
        "claude-code.mcp__github__create_issue"
    )


def proposal_of(deployment, use_id: str) -> dict:
    """The proposal the hook made for the call ``use_id`` (its idempotency key)."""
    _, page = deployment.api("GET", "/api/v1/proposals?action=tool.call&limit=200",
                             token=deployment.reviewer)  # fmt: skip
    (made,) = [p for p in page["items"] if p["idempotency_key"] == f"claude-code:{use_id}"]
    return made


def test_a_call_nobody_decides_in_time_gets_the_configured_answer_and_is_withdrawn(deployment):
    started = time.monotonic()
    answer = hook(
        deployment, event(*BASH, "toolu_04Late"), "--timeout", "1", "--on-timeout", "deny"
    )
    assert time.monotonic() - started < 20
    assert answer["permissionDecision"] == "deny"
    assert "was not decided in 1 s" in answer["permissionDecisionReason"]
    assert f"{deployment.base}/proposals/" in answer["permissionDecisionReason"]
    made = proposal_of(deployment, "toolu_04Late")
    assert (made["status"], made["withdraw_reason"]) == (
        "withdrawn",
        "the hook stopped waiting after 1 s and answered deny",
    )


def test_a_call_left_to_the_terminal_is_withdrawn_so_no_reviewer_approves_it_later(deployment):
    answer = hook(deployment, event(*EDIT, "toolu_07Ask"), "--timeout", "1")
    assert answer["permissionDecision"] == "ask"  # Claude Code asks the person at the terminal
    made = proposal_of(deployment, "toolu_07Ask")
    assert (made["status"], made["withdraw_reason"]) == (
        "withdrawn",
        "decided at the terminal: the hook stopped waiting after 1 s",
    )
    status, late = deployment.api(
        "POST", f"/api/v1/proposals/{made['id']}/approve", {}, token=deployment.reviewer
    )
    assert (status, late["error"]["type"]) == (409, "conflict")
    # The outcome, reported after the call, finds no approval to report to.
    after = event(*EDIT, "toolu_07Ask", "PostToolUse", tool_response={"success": True})
    assert hook(deployment, after) is None
    assert proposal_of(deployment, "toolu_07Ask")["execution_id"] is None


def test_a_paused_agent_leaves_the_call_to_the_terminal_and_says_why(deployment):
    token = agent_token(deployment.data_dir, "claude-paused", "tool.call:claude-code.*")
    manage(deployment.data_dir, "agents", "pause", "claude-paused", "--reason", "too many denials")
    answer = hook(deployment, event(*BASH, "toolu_08Paused"), token=token)
    assert answer["permissionDecision"] == "ask"
    reason = answer["permissionDecisionReason"]
    assert reason.startswith("Airlock: agent claude-paused is paused since ")
    assert reason.endswith("(too many denials); an admin must resume it")


@pytest.mark.parametrize(
    ("payload", "token", "says"),
    [
        ("not json", None, "not a Claude Code tool event"),
        ({"tool_input": {}}, None, "not a Claude Code tool event"),
        (event(*BASH, "toolu_05"), "", "not logged in"),
        (event(*BASH, "toolu_06"), "alk_revoked", "the token was refused"),
    ],
)
def test_when_airlock_cannot_be_asked_the_person_at_the_terminal_is(
    deployment, payload, token, says
):
    answer = hook(deployment, payload, token=token)
    assert answer["permissionDecision"] == "ask"
    assert says in answer["permissionDecisionReason"]
    assert hook(deployment, payload, "--on-error", "deny", token=token)["permissionDecision"] == (
        "deny"
    )
