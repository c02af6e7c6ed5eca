"""The MCP gateway seen by a reviewer: an upstream's tool call held, read and approved in the
console, then made upstream; the agent's call returns the upstream's answer."""

from __future__ import annotations

import asyncio
import json
import threading

from tests.browser.conftest import wait_for
from tests.gateway.conftest import open_folder, stdio_upstream
from tests.mcp.conftest import connect, text_of
from tests.serving import manage


def test_a_reviewer_approves_an_upstream_call_in_the_console_and_the_agent_gets_its_answer(
    server, login, tmp_path
):
    data = server.log.parent  # serve.log lies in the data dir
    calls = open_folder("airlock-browser-calls-") / "calls.jsonl"
    listed = {"upstreams": {"billing": stdio_upstream(calls)}}
    (tmp_path / "upstreams.yaml").write_text(json.dumps(listed))
    manage(data, "upstreams", "apply", str(tmp_path / "upstreams.yaml"))

    answer = {}

    def agent() -> None:
        async def call():
            async with connect(server.base + "/mcp", server.token) as client:
                return await client.call_tool(
                    "billing__refund",
                    {"customer": "c-1042", "amount": 120, "reason": "double charge"},
                )

        answer["result"] = asyncio.run(call())

    calling = threading.Thread(target=agent)
    calling.start()
    page = login("reviewer")
    held = wait_for(
        lambda: [
            p
            for p in server.api("GET", "/api/v1/proposals?status=pending&action=tool.call")[1][
                "items"
            ]
            if p["parameters"]["tool"] == "billing.refund"
        ]
    )[0]
    page.goto(f"{server.base}/proposals/{held['id']}/")
    assert page.inner_text("#tool-name") == "billing.refund"
    facts = page.inner_text(".tool-arguments")
    assert "customer" in facts and "c-1042" in facts and "120" in facts
    assert "MCP gateway calls upstream server billing" in page.inner_text("#tool-carrier")
    assert not calls.exists()  # nothing reached the upstream before the decision
    page.click("#approve-button")
    page.wait_for_selector("#proposal-state .status-approved")
    calling.join(timeout=60)
    result = answer["result"]
    assert (result.is_error, text_of(result)) == (False, "refunded 120 to c-1042 (double charge)")
    made = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [(c["tool"], c["arguments"]["amount"]) for c in made] == [("refund", 120)]
    page.wait_for_selector("#execution-link")
    page.click("#execution-link")
    wait_for(lambda: "refunded 120 to c-1042" in page.inner_text("body"))
