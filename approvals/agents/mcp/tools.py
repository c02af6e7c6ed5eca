"""The tools Airlock serves over MCP, and which of them a caller sees.

One tool per action of the catalog, generated from its ``ActionSpec``: the
input schema is the action's parameter serializer plus the proposal's
envelope (``reason``, ``urgency``, ``idempotency_key``) and ``wait_seconds``.
Beside them: the sandbox session tools, and the tools that read proposals
and executions, withdraw a proposal, cancel an execution and list capabilities. There is no tool
that approves or rejects: deciding is for people, in the console or with a
reviewer's own token on the REST API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import mcp_types as types
from django.conf import settings
from rest_framework import serializers

from approvals.agents.mcp.auth import Principal
from approvals.agents.mcp.context import Call
from approvals.agents.mcp.schema import object_schema
from approvals.choices import Urgency
from executions.actions import ActionSpec, catalog
from infrastructure.rest.serializers import Serializer

WAIT_MAX_SECONDS = 3600  # a waiting call holds no thread and no connection, only its stream


def _wait_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=0,
        max_value=WAIT_MAX_SECONDS,
        default=settings.MCP_WAIT_SECONDS,
        help_text="Seconds this call may wait for the decision and the run to end. When they "
        "run out, the call returns the proposal id and its status: call get_proposal later.",
    )


class EnvelopeArguments(Serializer):
    """What every action tool takes besides the action's own parameters."""

    reason = serializers.CharField(
        max_length=4000,
        allow_blank=True,
        default="",
        help_text="Why you want this done; reviewers read it before they decide.",
    )
    urgency = serializers.ChoiceField(
        choices=Urgency.values,
        default=Urgency.NORMAL,
        help_text="How soon a reviewer should look at it, if it needs review.",
    )
    idempotency_key = serializers.CharField(
        max_length=200,
        required=False,
        help_text="A key of your choosing. Calling again with the same key returns the "
        "proposal made the first time instead of proposing twice: use one whenever a call "
        "may be retried (a dropped connection loses nothing).",
    )
    wait_seconds = _wait_field()


class ProposalArguments(serializers.Serializer):
    proposal_id = serializers.IntegerField(min_value=1, help_text="The id a tool call returned.")
    wait_seconds = _wait_field()


class WithdrawArguments(serializers.Serializer):
    proposal_id = serializers.IntegerField(min_value=1, help_text="The id a tool call returned.")
    reason = serializers.CharField(
        max_length=500,
        allow_blank=True,
        default="",
        help_text="Why it is no longer needed; reviewers and the audit trail read it.",
    )


class ExecutionArguments(serializers.Serializer):
    execution_id = serializers.IntegerField(min_value=1, help_text="The execution's id.")


class NoArguments(serializers.Serializer):
    pass


class SessionCreateArguments(serializers.Serializer):
    language = serializers.ChoiceField(
        choices=["python"], default="python", help_text="The interpreter the session runs."
    )


class SessionArguments(serializers.Serializer):
    session_id = serializers.IntegerField(min_value=1, help_text="The sandbox session's id.")


Run = Callable[[Call, dict], Awaitable[types.CallToolResult]]


@dataclass(frozen=True)
class ToolDef:
    """One tool: what a client lists, who sees it, and the coroutine that answers a call."""

    name: str
    description: str
    arguments: type[serializers.Serializer]  # validates what the tool is called with
    run: Run
    # "agent" (needs the capability), "proposer" (any agent), "reader" (agents and
    # reviewers), "anyone"
    audience: str
    capability: str | None = None
    read_only: bool = False
    spec: ActionSpec | None = None  # set on the tools that propose an action

    def visible_to(self, principal: Principal) -> bool:
        if self.audience == "agent":
            return principal.may(self.capability or "")
        if self.audience == "proposer":
            return principal.agent is not None
        if self.audience == "reader":
            return principal.agent is not None or principal.reviewer
        return True

    def as_tool(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema(),
            annotations=types.ToolAnnotations(
                title=self.capability or self.name,
                read_only_hint=self.read_only,
                destructive_hint=not self.read_only,
                open_world_hint=False,
            ),
        )

    def input_schema(self) -> dict[str, Any]:
        schema = object_schema(self.arguments)
        if self.spec is None:
            return schema
        parameters = object_schema(self.spec.serializer)
        envelope = object_schema(EnvelopeArguments)
        schema["properties"] = {**parameters["properties"], **envelope["properties"]}
        schema["required"] = parameters.get("required", [])
        if not schema["required"]:
            del schema["required"]
        return schema


def tool_name(action: str) -> str:
    """``docker.stop_container`` → ``docker_stop_container``: names clients accept everywhere."""
    return action.replace(".", "_")


def _where(spec: ActionSpec) -> str:
    if spec.sandboxed:
        return "It runs in Airlock's sandbox."
    if spec.host_bound:
        return "It runs on the worker's host."
    if spec.name.startswith("docker."):
        return "It acts on the Docker engine Airlock is configured with."
    return ""


HOW_A_CALL_GOES = (
    "Airlock's policy and risk scoring approve it at once, deny it, or hold it for human "
    "reviewers. The call waits for the decision and the run (progress notifications say what it "
    "is waiting for, then stream the output) and returns the result: stdout, stderr, exit code, "
    "whether output was truncated, the sandbox backend and the provenance. A denied, rejected, "
    "expired, withdrawn or failed proposal is a tool error whose message gives the reason or "
    "the reviewer's comment. If wait_seconds run out first, it returns the proposal id and "
    "status: call get_proposal with that id to wait again or read the result, or withdraw it "
    "if you no longer need it. Refused for now (too_many_pending, rate_limited), it is a tool "
    "error that says how many seconds to wait before trying again; agent_paused means an "
    "admin must resume you first."
)


def action_description(spec: ActionSpec) -> str:
    parts = [
        spec.description,
        "Read-only." if spec.read_only else "",
        _where(spec),
        f"Calling this proposes the action `{spec.name}` (base risk {spec.base_risk}/10):",
        HOW_A_CALL_GOES,
    ]
    return " ".join(part for part in parts if part)


def action_tools(propose: Callable[..., Awaitable[types.CallToolResult]]) -> list[ToolDef]:
    """One tool per action of the catalog that Airlock carries out, in name order;
    ``propose(spec, call, arguments)``. (A call waits for the run's result; an action
    the agent carries out itself, ``tool.call``, has none to wait for.)"""
    return [
        ToolDef(
            name=tool_name(spec.name),
            description=action_description(spec),
            arguments=EnvelopeArguments,
            run=partial(propose, spec),
            audience="agent",
            capability=spec.name,
            read_only=spec.read_only,
            spec=spec,
        )
        for spec in sorted(catalog().values(), key=lambda spec: spec.name)
        if not spec.reported
    ]


class Catalog:
    """Every tool by name; built once per process."""

    def __init__(self, tools: list[ToolDef]):
        names = [tool.name for tool in tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"two MCP tools are named {', '.join(duplicates)}")
        for tool in tools:
            _check_no_clash(tool)
        self.tools = {tool.name: tool for tool in tools}
        # Made once: reading a schema off a serializer instantiates it (milliseconds each).
        self._listed = {tool.name: tool.as_tool() for tool in tools}

    def get(self, name: str) -> ToolDef | None:
        return self.tools.get(name)

    def listed_for(self, principal: Principal) -> list[types.Tool]:
        return [
            self._listed[name] for name, tool in self.tools.items() if tool.visible_to(principal)
        ]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        listed = self._listed.get(name)
        return listed.input_schema if listed is not None else None


def _check_no_clash(tool: ToolDef) -> None:
    """An action parameter must not share a name with an envelope argument (one would hide the other)."""
    if tool.spec is None:
        return
    clash = set(tool.spec.serializer().fields) & set(EnvelopeArguments().fields)
    if clash:
        raise ValueError(f"{tool.spec.name} has parameters named like envelope arguments: {clash}")
