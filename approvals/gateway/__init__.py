"""The MCP gateway: other MCP servers' tools behind Airlock's policy and review.

An admin lists upstream servers (a stdio command or a streamable HTTP URL);
their tools appear on Airlock's ``/mcp`` as ``<server>__<tool>``, each call
is a ``tool.call`` proposal for ``<server>.<tool>``, and only once it is
approved does Airlock call the upstream, reporting the outcome as the agent
would.

- ``models``: the upstream servers (``Upstream``);
- ``config``: what a valid upstream is, and every change to the list, audited
  (from the console and from a file: ``manage.py upstreams``);
- ``connections``: one live connection per upstream and process, opened on
  first use and opened again after the upstream died;
- ``carry``: the call upstream of an approved execution, at most once.

May import ``executions`` (to claim and report a ``tool.call``), ``audit`` and
``infrastructure``; nothing of ``approvals`` but its vocabulary. The MCP
server (``approvals.agents.mcp.gateway``) and the console's page import it.
"""
