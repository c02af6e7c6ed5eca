"""One upstream's connection, in process: opened on first use, opened again after its process died."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from approvals.gateway import connections
from approvals.gateway.connections import Connection, Pool, Target, UpstreamDown
from tests.gateway.conftest import open_folder, stdio_upstream
from tests.serving import USER_PYTHON, free_port
from tests.support import wait_for


@pytest.fixture
def calls() -> Iterator[Path]:
    """Where the upstream writes down its calls, from its sandbox."""
    folder = open_folder("airlock-connections-")
    yield folder / "calls.jsonl"
    shutil.rmtree(folder, ignore_errors=True)


def stdio(calls, timeout: int = 10, **env) -> Target:
    config = stdio_upstream(calls, **env)
    return Target(
        name="up",
        transport="stdio",
        command=tuple(config["command"]),
        env=tuple(config["env"].items()),
        read=tuple(config["read"]),
        write=tuple(config["write"]),
        network=(),
        hidden=(),
        url="",
        headers=(),
        timeout_seconds=timeout,
        fingerprint="one",
    )


def processes(calls) -> list[str]:
    return [json.loads(line)["process"] for line in calls.read_text().splitlines()]


def test_a_crashed_process_is_started_again_on_the_next_call_and_the_call_is_not_made_twice(calls):

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
    before, crashed, after = processes(calls)
    assert before == crashed != after


def test_a_slow_call_times_out_and_the_connection_stays_usable(calls):
    async def scenario():
        connection = Connection(stdio(calls, timeout=1))
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
            lambda calls: replace(stdio(calls), command=(USER_PYTHON, "-c", "pass")),
            "upstream up is unreachable",
        ),
    ],
    ids=["no-command", "unset-variable", "http-refused", "exits-at-once"],
)
def test_an_upstream_that_cannot_be_reached_says_why(calls, target, said):
    async def scenario():
        connection = Connection(target(calls))
        try:
            await connection.list_tools()
        finally:
            connection.close()

    with pytest.raises(UpstreamDown) as raised:
        asyncio.run(scenario())
    assert said in raised.value.message


def test_a_changed_configuration_opens_a_new_connection_and_a_removed_one_closes(calls):
    async def scenario():
        pool = Pool()
        first = pool.connection(stdio(calls))
        await first.list_tools()
        same = pool.connection(stdio(calls))
        changed = pool.connection(replace(stdio(calls), fingerprint="two"))
        await asyncio.sleep(0.5)
        first_alive = first.alive
        await changed.list_tools()
        pool.keep_current([replace(stdio(calls), fingerprint="two")])
        kept = changed.alive
        pool.keep_current([])
        await asyncio.sleep(0.5)
        return (
            same is first,
            changed is not first,
            first_alive,
            kept,
            changed.alive,
            pool.connections,
        )

    same, new, first_alive, kept, changed_alive, left = asyncio.run(scenario())
    assert same and new and kept
    assert first_alive is False and changed_alive is False and left == {}


def test_a_process_no_call_reaches_ends_a_removed_upstreams_server_all_the_same(calls, monkeypatch):
    monkeypatch.setattr(connections, "WATCH_SECONDS", 0.2)
    listed = [stdio(calls)]

    async def resolve():
        return list(listed)

    async def scenario():
        pool = Pool()
        connection = pool.connection(stdio(calls))
        await connection.list_tools()
        pool.watch(resolve)
        await asyncio.sleep(0.6)
        still = connection.alive
        listed.clear()  # removed, as another process's admin did
        await asyncio.sleep(0.6)
        return still, connection.alive, pool.connections, pool._watcher.done()

    still, alive, left, watcher_done = asyncio.run(scenario())
    assert still is True and alive is False and left == {} and watcher_done


def test_an_upstream_that_failed_to_start_is_not_tried_again_at_once(calls):
    starts = calls.parent / "starts"
    note_and_exit = f"open({str(starts)!r}, 'a').write('started\\n')"
    broken = replace(stdio(calls), command=(USER_PYTHON, "-c", note_and_exit))

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


def test_what_an_upstream_writes_to_stderr_goes_to_the_log_named(calls, caplog):
    said = "import sys; sys.stderr.write('no token given\\n'); sys.exit(2)"
    broken = replace(stdio(calls), command=(USER_PYTHON, "-c", said))

    async def scenario():
        connection = Connection(broken)
        with pytest.raises(UpstreamDown):
            await connection.list_tools()
        await connection.ended()

    with caplog.at_level("WARNING", logger="approvals.gateway.connections"):
        asyncio.run(scenario())
        wait_for(lambda: "upstream up: no token given" in caplog.text, timeout=5)
