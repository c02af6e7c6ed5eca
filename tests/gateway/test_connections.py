"""One upstream's connection, in process: opened on first use, opened again after its process died."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace

import pytest

from approvals.gateway.connections import Connection, Pool, Target, UpstreamDown
from tests.serving import ROOT, free_port


def stdio(calls, timeout: int = 10, **env) -> Target:
    return Target(
        name="up",
        transport="stdio",
        command=(sys.executable, "-m", "tests.gateway.upstream", "stdio"),
        env=tuple({"UPSTREAM_CALLS": str(calls), "PYTHONPATH": str(ROOT), **env}.items()),
        url="",
        headers=(),
        timeout_seconds=timeout,
        fingerprint="one",
    )


def pids(calls) -> list[int]:
    return [json.loads(line)["pid"] for line in calls.read_text().splitlines()]


def test_a_crashed_process_is_started_again_on_the_next_call_and_the_call_is_not_made_twice(
    tmp_path,
):
    calls = tmp_path / "calls.jsonl"

    async def scenario():
        connection = Connection(stdio(calls))
        try:
            first = await connection.call("echo", {"text": "one"})
            with pytest.raises(UpstreamDown, match="closed the connection during crash"):
                await connection.call("crash", {})
            second = await connection.call("echo", {"text": "two"})
            return first, second, connection.opened
        finally:
            connection.close()

    first, second, opened = asyncio.run(scenario())
    assert (first.structured_content, second.structured_content) == (
        {"result": "echo: one"},
        {"result": "echo: two"},
    )
    assert opened == 2
    before, crashed, after = pids(calls)
    assert before == crashed != after


def test_a_slow_call_times_out_and_the_connection_stays_usable(tmp_path):
    async def scenario():
        connection = Connection(stdio(tmp_path / "calls.jsonl", timeout=1))
        try:
            with pytest.raises(UpstreamDown, match="did not answer slow within 1 s"):
                await connection.call("slow", {"seconds": 3})
            return await connection.call("echo", {"text": "still here"})
        finally:
            connection.close()

    assert asyncio.run(scenario()).structured_content == {"result": "echo: still here"}


@pytest.mark.parametrize(
    ("target", "said"),
    [
        (
            lambda calls: replace(stdio(calls), command=("/nonexistent/mcp-server",)),
            "upstream up is unreachable: its command was not found",
        ),
        (
            lambda calls: replace(stdio(calls), missing=("CRM_TOKEN",)),
            "environment variable(s) CRM_TOKEN are not set where Airlock runs",
        ),
        (
            lambda calls: replace(
                stdio(calls), transport="http", url=f"http://127.0.0.1:{free_port()}/mcp"
            ),
            "upstream up is unreachable: it refused the connection",
        ),
        (
            lambda calls: replace(stdio(calls), command=(sys.executable, "-c", "pass")),
            "upstream up is unreachable",
        ),
    ],
    ids=["no-command", "unset-variable", "http-refused", "exits-at-once"],
)
def test_an_upstream_that_cannot_be_reached_says_why(tmp_path, target, said):
    async def scenario():
        connection = Connection(target(tmp_path / "calls.jsonl"))
        try:
            await connection.list_tools()
        finally:
            connection.close()

    with pytest.raises(UpstreamDown) as raised:
        asyncio.run(scenario())
    assert said in raised.value.message


def test_a_changed_configuration_opens_a_new_connection_and_a_removed_one_closes(tmp_path):
    async def scenario():
        pool = Pool()
        first = pool.connection(stdio(tmp_path / "calls.jsonl"))
        await first.list_tools()
        same = pool.connection(stdio(tmp_path / "calls.jsonl"))
        changed = pool.connection(replace(stdio(tmp_path / "calls.jsonl"), fingerprint="two"))
        await asyncio.sleep(0.5)
        first_alive = first.alive
        await changed.list_tools()
        pool.keep_only(set())
        await asyncio.sleep(0.5)
        return same is first, changed is not first, first_alive, changed.alive, pool.connections

    same, new, first_alive, changed_alive, left = asyncio.run(scenario())
    assert same and new
    assert first_alive is False and changed_alive is False and left == {}


def test_an_upstream_that_failed_to_start_is_not_tried_again_at_once(tmp_path):
    starts = tmp_path / "starts"
    note_and_exit = f"open({str(starts)!r}, 'a').write('started\\n')"
    broken = replace(stdio(tmp_path / "calls.jsonl"), command=(sys.executable, "-c", note_and_exit))

    async def scenario():
        connection = Connection(broken)
        errors = []
        for _ in range(3):
            try:
                await connection.list_tools()
            except UpstreamDown as exc:
                errors.append(exc.message)
        return errors, connection.opened

    errors, opened = asyncio.run(scenario())
    assert len(errors) == 3 and len(set(errors)) == 1 and opened == 0
    assert starts.read_text() == "started\n"  # the two later calls started nothing
