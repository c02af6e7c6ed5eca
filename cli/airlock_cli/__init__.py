"""``airlock``: the command line of Airlock's API, for reviewers, operators and CI jobs.

Owns the commands (``main``: login, queue, show, approve, reject, watch, run,
policy, audit, hook), coding agents' permission hooks (``hooks``: Claude
Code's tool calls as ``tool.call`` proposals), the API client and its exit codes (``client``), where a login is kept
(``config``), the terminal's tables and pages (``render``) and the live output
over the websocket (``stream``).

A client of the published API only: it imports nothing of the server's
packages, so it installs on its own (``pip install ./cli``) with click, rich,
httpx and websockets.
"""
