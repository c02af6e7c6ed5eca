"""MCP on the scale deployment's parts: PostgreSQL, and Redis as broker and channel layer.

The output a call streams comes through the Redis channel layer here, where
the embedded deployment's layer is a table in SQLite.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from tests.mcp.conftest import ONE_REVIEWER, Progress, Served, connect, text_of
from tests.serving import start_server
from tests.support import port_open, require

ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/11"  # a database of its own: the Celery queues are shared


@pytest.fixture(scope="module")
def scale_served(tmp_path_factory) -> Iterator[Served]:
    require(port_open("127.0.0.1", 5432), "PostgreSQL is not running on 127.0.0.1:5432")
    require(port_open("127.0.0.1", 6379), "Redis is not running on 127.0.0.1:6379")
    import psycopg

    name = f"airlock_mcp_{os.getpid()}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    env = {
        "DATABASE_URL": ADMIN_URL.rsplit("/", 1)[0] + f"/{name}",
        "SECRET_KEY": f"test-{name}",
        "REDIS_URL": REDIS_URL,
        "CHANNEL_LAYER_PREFIX": name,
    }
    data = tmp_path_factory.mktemp("airlock-scale") / "data"
    try:
        server = start_server(data, extra_env=env)
        try:
            yield Served(server, data, env)
        finally:
            server.stop()
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_a_call_waits_for_its_reviewer_and_streams_output_through_redis(scale_served):
    served = scale_served
    reviewer = served.user_token("reviewer")
    progress = Progress()
    async with connect(served.url, served.server.token) as client:
        quick = await client.call_tool("script_execute", {"language": "python", "code": "print(1)"})
        call = asyncio.create_task(
            client.call_tool(
                "script_execute",
                {"language": "python", "code": ONE_REVIEWER},
                progress_callback=progress,
            )
        )
        pk = int((await progress.wait_for(r"proposal (\d+): pending review")).group(1))
        await asyncio.to_thread(served.decide, pk, "approve", reviewer)
        result = await asyncio.wait_for(call, 60)
    assert quick.structured_content["execution"]["stdout"] == "1\n", text_of(quick)
    assert result.structured_content["execution"]["stdout"] == "line 0\nline 1\nline 2\n"
    approved = next(i for i, m in enumerate(progress.messages) if m.startswith("approved by"))
    assert "".join(progress.messages[approved + 1 :]) == "line 0\nline 1\nline 2\n"
