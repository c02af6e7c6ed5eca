"""Coding agents' permission hooks: each tool call a ``tool.call`` proposal, decided in Airlock.

Claude Code runs a command hook with the event as JSON on standard input and
reads a decision as JSON on standard output (exit 0):

- ``PreToolUse``: the call is proposed (tool ``claude-code.<tool_name>``, its
  ``tool_input`` as the arguments, ``tool_use_id`` as the idempotency key)
  and the hook waits for the decision: approved → ``allow``; denied,
  rejected or expired → ``deny`` with the reason, which the agent reads.
  Not decided in time, or Airlock not reachable: ``--on-timeout`` and
  ``--on-error`` (``ask``: Claude Code asks the person at the terminal).
  A call not decided in time is withdrawn: the decision is made elsewhere (at
  the terminal, or by ``--on-timeout``), so no reviewer approves it afterwards
  for nobody. A proposal refused for now (429) is sent again after the
  server's Retry-After, within ``--timeout``; a paused agent (423) is an error.
- ``PostToolUse`` / ``PostToolUseFailure``: the outcome is reported to the
  execution the approval made (found again by the idempotency key), so the
  audit trail and the reviewer's page show how the call went.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from airlock_cli.client import CONFLICT, Api, CliError

DECISIONS = ("allow", "deny", "ask")
WAIT_STEP = 30
REPORT_LIMIT = 60_000  # characters of a tool's response kept in the report


def claude_code(
    event: object,
    client: Callable[[], Api],
    *,
    timeout: float,
    on_timeout: str,
    on_error: str,
    prefix: str,
) -> dict | None:
    """The hook's answer to one event (None: nothing to say, the call goes on as it would)."""
    if not isinstance(event, dict) or not isinstance(event.get("tool_name"), str):
        return _decision(on_error, "Airlock: the hook's input is not a Claude Code tool event")
    name = event.get("hook_event_name", "PreToolUse")
    try:
        if name == "PreToolUse":
            return _before(event, client(), timeout, on_timeout, prefix)
        if name in ("PostToolUse", "PostToolUseFailure"):
            _after(event, client(), prefix, succeeded=name == "PostToolUse")
            return None
    except CliError as error:
        if name != "PreToolUse":
            return None  # the call has happened; nothing to decide
        return _decision(on_error, f"Airlock: {error.message}")
    return None


def _proposal(event: dict, prefix: str) -> dict:
    tool_input = event.get("tool_input")
    arguments = tool_input if isinstance(tool_input, dict) else {"input": tool_input}
    where = event.get("cwd") or "an unknown directory"
    body = {
        "action": "tool.call",
        "parameters": {"tool": f"{prefix}{event['tool_name']}", "arguments": arguments},
        "reason": f"Claude Code in {where}",
    }
    if isinstance(event.get("tool_use_id"), str) and event["tool_use_id"]:
        body["idempotency_key"] = f"claude-code:{event['tool_use_id']}"[:200]
    return body


def _before(event: dict, api: Api, timeout: float, on_timeout: str, prefix: str) -> dict:
    deadline = time.monotonic() + timeout
    proposal = api.propose(_proposal(event, prefix), wait=1, patience=timeout)
    while proposal["status"] == "pending":
        left = deadline - time.monotonic()
        if left <= 0:
            proposal = _stop_waiting(api, proposal, timeout, on_timeout)
            break
        wait = min(WAIT_STEP, max(int(left), 1))
        proposal = api.call(
            "GET", f"proposals/{proposal['id']}", params={"wait": wait, "until": "decided"},
            wait=wait,
        ).json()  # fmt: skip
    if proposal["status"] in ("pending", "withdrawn"):  # decided outside Airlock, as configured
        return _decision(
            on_timeout,
            f"Airlock: proposal #{proposal['id']} was not decided in {timeout:g} s "
            f"({api.url}/proposals/{proposal['id']}/)",
        )
    if proposal["status"] == "approved":
        return _decision("allow", f"Airlock: approved ({_why(proposal)})")
    return _decision("deny", f"Airlock: {proposal['status']}: {_why(proposal)}")


def _stop_waiting(api: Api, proposal: dict, timeout: float, on_timeout: str) -> dict:
    """Withdraw the proposal nobody decided in time: ``--on-timeout`` decides the call now
    (``ask``: the person at the terminal), and a reviewer must not approve it later for
    nobody. The proposal as it ends: withdrawn, or decided meanwhile (that decision
    stands), or still pending if Airlock could not be told (its expiry ends it)."""
    reason = (
        f"decided at the terminal: the hook stopped waiting after {timeout:g} s"
        if on_timeout == "ask"
        else f"the hook stopped waiting after {timeout:g} s and answered {on_timeout}"
    )
    path = f"proposals/{proposal['id']}"
    try:
        return api.post(f"{path}/withdraw", {"reason": reason})
    except CliError as error:
        if error.code != CONFLICT:
            return proposal
    try:
        return api.get(path)  # decided between the last read and the withdrawal
    except CliError:
        return proposal


def _after(event: dict, api: Api, prefix: str, succeeded: bool) -> None:
    proposal = api.call("POST", "proposals", json=_proposal(event, prefix)).json()
    if not proposal.get("execution_id") or proposal.get("execution_status") != "running":
        return  # not approved here, or already reported
    response = event.get("tool_response", event.get("error", ""))
    output = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    if len(output) > REPORT_LIMIT:
        output = output[:REPORT_LIMIT] + f"\n… ({len(output) - REPORT_LIMIT} more characters)"
    api.call(
        "POST",
        f"executions/{proposal['execution_id']}/report",
        json={"status": "succeeded" if succeeded else "failed", "output": output},
    )


def _why(proposal: dict) -> str:
    comments = [
        f"{d['reviewer']}: {d['comment']}" if d.get("comment") else d["reviewer"]
        for d in proposal.get("decisions", [])
    ]
    if comments:
        return "; ".join(comments)
    path = proposal.get("decision_path") or {}
    return path.get("reason") or path.get("step") or proposal["status"]


def _decision(decision: str, reason: str) -> dict:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }
