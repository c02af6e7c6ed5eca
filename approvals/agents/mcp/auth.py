"""Who is calling ``/mcp``: the bearer token of every request, resolved as the REST API does.

The transport is stateless, so each HTTP request authenticates on its own: a
token revoked between two calls is refused at the second.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from accounts.roles import is_agent, is_reviewer
from approvals.agents.authentication import resolve_token
from approvals.agents.mcp.db import on_thread
from approvals.models import Agent
from audit.services import actor_label

SCOPE_KEY = "airlock.principal"  # where the endpoint leaves the principal in the ASGI scope
# A JSON-RPC code in the server-defined range, so MCP clients report the message.
UNAUTHENTICATED_CODE = -32001


@dataclass(frozen=True)
class Principal:
    """The caller of one request: an agent (which proposes) or a user (who may read)."""

    user: object  # what ``request.user`` is in the REST API
    agent: Agent | None
    reviewer: bool
    label: str  # the audit trail's name for the caller

    def may(self, capability: str) -> bool:
        """Whether this is an agent with a capability glob that grants ``capability``."""
        return self.agent is not None and self.agent.capability_for(capability) is not None


class Refused(Exception):
    """The request carries no usable token; ``message`` says why."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


async def authenticate(headers: list[tuple[bytes, bytes]]) -> Principal:
    """The principal of an ``Authorization: Bearer`` header, or ``Refused``."""
    token = bearer_token(headers)
    principal = await _resolve(token)
    if principal is None:
        raise Refused("invalid or revoked token")
    return principal


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str:
    raw = next((value for name, value in headers if name == b"authorization"), None)
    if raw is None:
        raise Refused("authentication required: send 'Authorization: Bearer <token>'")
    scheme, _, token = raw.decode("latin-1").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token or not token.isprintable():
        raise Refused("malformed Authorization header; use 'Bearer <token>'")
    return token


@on_thread
def _resolve(token: str) -> Principal | None:
    resolved = resolve_token(token)
    if resolved is None:
        return None
    user, _ = resolved
    agent = user.agent if is_agent(user) else None
    return Principal(user=user, agent=agent, reviewer=is_reviewer(user), label=actor_label(user))


def refusal_body(message: str) -> bytes:
    """The API's error shape, which is also a JSON-RPC error, so MCP clients show the message."""
    error = {"type": "not_authenticated", "message": message, "code": UNAUTHENTICATED_CODE}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
