"""The agents' interface: the REST API under ``/api/v1/``, MCP, waiting, token authentication.

Owns the proposal and sandbox endpoints (``api``), the proposals list
(``listing``), the URLs of the app's
API (``urls``, the policy's endpoints with them), long-polls that wait
without a thread (``waiting``; what could give a waiting list a row:
``changes``), bearer tokens (``authentication``) and the
MCP server (``mcp/``). Endpoints parse input, check access and call one
service of the core or of ``executions``.

May import everything of the app below it and the apps below the app;
never ``approvals.review``.
"""
