"""Airlock as a Model Context Protocol server: every tool call is a proposal.

- ``http``: the ``/mcp`` endpoint (streamable HTTP, stateless, bearer tokens);
- ``server``: the SDK server that lists a caller's tools and answers calls;
- ``tools``: the tools, generated from the action catalog, and who sees which;
- ``schema``: JSON Schema read off DRF serializers;
- ``calls``: what a call does (propose and wait, read, cancel, sessions);
- ``follow``: an execution's output, followed for progress notifications;
- ``results``: the answers, structured and as text;
- ``stdio``: the bridge for clients that only launch commands (``manage.py mcp-stdio``).
"""
