"""Live output over the websocket: auth, resume after a disconnect, final status."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection, transaction
from django.db.backends.signals import connection_created
from django.test.utils import CaptureQueriesContext

from approvals.core.services import submit
from console.asgi import application
from executions import services
from tests.support import wait_for

LINES = 40
PRINT_LINE = {"action": "script.execute", "parameters": {"language": "python", "code": "print(1)"}}
CODE = f"import time\nfor i in range({LINES}):\n    print(f'line {{i}}', flush=True)\n    time.sleep(0.05)\n"
EXPECTED = "".join(f"line {i}\n" for i in range(LINES))


def connect(
    execution_id: int, token: str | None, after: int | None = None
) -> WebsocketCommunicator:
    path = f"/ws/executions/{execution_id}/" + (f"?after={after}" if after is not None else "")
    headers = [(b"origin", b"http://localhost")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


@database_sync_to_async
def approved_execution(agent, code: str = CODE) -> int:
    proposal = submit(
        agent, {"action": "script.execute", "parameters": {"language": "python", "code": code}}
    ).proposal
    return proposal.execution_id


async def receive_until(communicator, stop, timeout: float = 20.0) -> list[dict]:
    messages = []
    async with asyncio.timeout(timeout):
        while True:
            message = await communicator.receive_json_from(timeout=timeout)
            messages.append(message)
            if stop(message, messages):
                return messages


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
async def test_a_client_that_disconnects_and_resumes_gets_exactly_the_output(agent_and_token):
    agent, token = agent_and_token
    execution_id = await approved_execution(agent)
    worker = threading.Thread(target=services.run, args=[execution_id])
    worker.start()
    try:
        first = connect(execution_id, token)
        connected, _ = await first.connect()
        assert connected
        part = await receive_until(
            first, lambda m, ms: sum(len(x.get("data", "")) for x in ms) >= 60
        )
        await first.disconnect()
        last_seq = max(m["seq"] for m in part if m["type"] == "chunk")

        second = connect(execution_id, token, after=last_seq)
        connected, _ = await second.connect()
        assert connected
        rest = await receive_until(second, lambda m, ms: m["type"] == "status")
        await second.disconnect()
    finally:
        await asyncio.to_thread(worker.join)
    chunks = [m for m in part + rest if m["type"] == "chunk"]
    seqs = [c["seq"] for c in chunks]
    assert seqs == list(range(1, len(seqs) + 1)), "a gap or a duplicate"
    assert "".join(c["data"] for c in chunks) == EXPECTED
    assert rest[-1]["status"] == "succeeded"
    assert rest[-1]["terminal"] is True


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
async def test_a_finished_execution_replays_everything_then_the_status(agent_and_token):
    agent, token = agent_and_token
    execution_id = await approved_execution(agent, "print('a')\nprint('b')")
    await database_sync_to_async(services.run)(execution_id)
    communicator = connect(execution_id, token)
    assert (await communicator.connect())[0]
    messages = await receive_until(communicator, lambda m, ms: m["type"] == "status")
    assert "".join(m["data"] for m in messages if m["type"] == "chunk") == "a\nb\n"
    assert messages[-1]["status"] == "succeeded"
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
@pytest.mark.parametrize("who", ["anonymous", "bad-token", "other-agent"])
async def test_strangers_are_refused(agent_and_token, make_agent, who):
    agent, _ = agent_and_token
    execution_id = await approved_execution(agent, "print(1)")
    token = {"anonymous": None, "bad-token": "alk_nope"}.get(who)
    if who == "other-agent":
        _, token = await database_sync_to_async(make_agent)("other", ["*"])
    communicator = connect(execution_id, token)
    connected, code = await communicator.connect()
    assert not connected
    assert code in (4401, 4404)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
async def test_a_bad_after_is_refused(agent_and_token):
    agent, token = agent_and_token
    execution_id = await approved_execution(agent, "print(1)")
    communicator = WebsocketCommunicator(
        application,
        f"/ws/executions/{execution_id}/?after=minus",
        headers=[(b"origin", b"http://localhost"), (b"authorization", f"Bearer {token}".encode())],
    )
    connected, code = await communicator.connect()
    assert (connected, code) == (False, 4400)


def first_line_written(recorder) -> None:
    """Emit a first line and wait for its write: at once, after a quiet spell."""
    from executions.models import OutputChunk

    recorder.emit("stdout", "first\n")
    wait_for(
        lambda: OutputChunk.objects.filter(execution_id=recorder.execution_id).exists(),
        timeout=10,
        explain=lambda: "(the first line waited for the batching interval)",
    )


@pytest.mark.django_db(transaction=True)
def test_runs_one_after_another_write_their_output_on_the_same_thread(agent_and_token):
    """A run starts no thread for its output (nor, on SQLite, a database connection)."""
    from executions import output

    def flushers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "output-flusher"}

    def one_run() -> None:
        execution_id = submit(agent_and_token[0], PRINT_LINE).proposal.execution_id
        recorder = output.ExecutionRecorder(execution_id, cap_bytes=1 << 20)
        first_line_written(recorder)
        assert recorder.stop() == []

    one_run()
    after_first = flushers()
    opened = []
    connection_created.connect(opened.append)
    try:
        one_run()
    finally:
        connection_created.disconnect(opened.append)
    assert len(after_first) >= 1
    assert flushers() == after_first
    if connection.vendor == "sqlite":  # PostgreSQL's are the pool's, taken per transaction
        assert opened == []


@pytest.mark.django_db(transaction=True)
def test_output_after_a_quiet_spell_is_written_at_once_and_a_stream_in_batches(
    agent_and_token, monkeypatch
):
    """The first write does not wait for the batching interval; what follows it does."""
    from executions import output
    from executions.models import OutputChunk

    monkeypatch.setattr(output, "FLUSH_INTERVAL_SECONDS", 3600)  # only "at once" can pass
    execution_id = submit(agent_and_token[0], PRINT_LINE).proposal.execution_id
    recorder = output.ExecutionRecorder(execution_id, cap_bytes=1 << 20)
    try:
        first_line_written(recorder)
        recorder.emit("stdout", "second\n")
        recorder.emit("stdout", "third\n")
        time.sleep(0.3)
        assert OutputChunk.objects.filter(execution_id=execution_id).count() == 1
    finally:
        with transaction.atomic():  # the batch, as the run's end stores it
            recorder.store(recorder.stop())
    chunks = list(OutputChunk.objects.filter(execution_id=execution_id).order_by("seq"))
    assert [(c.seq, c.data) for c in chunks] == [(1, "first\n"), (2, "second\nthird\n")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
async def test_a_follower_gets_everything_even_when_every_broadcast_is_lost(
    agent_and_token, monkeypatch
):
    from executions import consumers
    from executions import output as output_module

    agent, token = agent_and_token
    monkeypatch.setattr(consumers, "SAFETY_SECONDS", 0.2)
    monkeypatch.setattr(output_module, "broadcast_on_commit", lambda group, message: None)
    monkeypatch.setattr(services, "broadcast_on_commit", lambda group, message: None)
    execution_id = await approved_execution(agent, "print('a')\nprint('b')")
    communicator = connect(execution_id, token)
    assert (await communicator.connect())[0]
    await asyncio.to_thread(services.run, execution_id)  # tells nobody
    messages = await receive_until(communicator, lambda m, ms: m["type"] == "status")
    assert "".join(m["data"] for m in messages if m["type"] == "chunk") == "a\nb\n"
    assert messages[-1]["status"] == "succeeded"
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
def test_the_output_left_at_the_end_is_written_with_the_end_and_told_before_it(
    agent_and_token, monkeypatch
):
    """The recorder hands what it had not written to the transaction that ends the run."""
    from executions import output
    from executions.models import Execution, OutputChunk
    from executions.sandboxes.base import RunOutcome

    monkeypatch.setattr(output, "FLUSH_INTERVAL_SECONDS", 3600)  # the rest waits for the end
    told = []

    def tell(group, message):  # what would be broadcast, when it would be
        transaction.on_commit(lambda: told.append(message["type"]))

    for module in (output, services):
        monkeypatch.setattr(module, "broadcast_on_commit", tell)
    execution_id = submit(agent_and_token[0], PRINT_LINE).proposal.execution_id
    execution = services.claim(execution_id, "a-worker")
    recorder = output.ExecutionRecorder(execution_id, cap_bytes=1 << 20)
    first_line_written(recorder)
    recorder.emit("stdout", "second\n")
    recorder.emit("stderr", "third\n")
    rest = recorder.stop()
    assert [(c.seq, c.stream, c.data) for c in rest] == [
        (2, "stdout", "second\n"),
        (3, "stderr", "third\n"),
    ]
    assert OutputChunk.objects.filter(execution_id=execution_id).count() == 1  # not written yet
    told.clear()

    outcome = RunOutcome(exit_code=0, duration_ms=1, backend="local")
    with monkeypatch.context() as failing:
        failing.setattr(services, "record", lambda *args, **kwargs: 1 / 0)  # the end fails…
        with pytest.raises(ZeroDivisionError):
            services.finish(execution, outcome, recorder, rest)
    assert OutputChunk.objects.filter(execution_id=execution_id).count() == 1  # …and so does it
    assert Execution.objects.get(pk=execution_id).status == "running" and told == []

    with CaptureQueriesContext(connection) as end:
        services.finish(execution, outcome, recorder, rest)
    table = Execution._meta.db_table
    updates = [q["sql"] for q in end.captured_queries if q["sql"].startswith(f'UPDATE "{table}"')]
    assert len(updates) == 1, updates  # the rest's counters ride on the update that ends the run
    stored = Execution.objects.get(pk=execution_id)
    assert (stored.status, stored.last_seq, stored.output_bytes) == ("succeeded", 3, 19)
    assert stored.output_text("stdout") == "first\nsecond\n"
    assert stored.output_text("stderr") == "third\n"
    assert told == ["output.chunks", "execution.changed", "execution.status"]


@pytest.mark.django_db(transaction=True)
def test_output_left_at_an_end_that_comes_too_late_is_still_counted(agent_and_token, monkeypatch):
    """The sweeper declared the run lost first: its last output is kept, and counted."""
    from executions import output
    from executions.models import Execution
    from executions.sandboxes.base import RunOutcome

    monkeypatch.setattr(output, "FLUSH_INTERVAL_SECONDS", 3600)
    execution_id = submit(agent_and_token[0], PRINT_LINE).proposal.execution_id
    execution = services.claim(execution_id, "a-worker")
    recorder = output.ExecutionRecorder(execution_id, cap_bytes=1 << 20)
    first_line_written(recorder)
    recorder.emit("stdout", "late\n")
    rest = recorder.stop()
    Execution.objects.filter(pk=execution_id).update(status="lost")
    ended = services.finish(
        execution, RunOutcome(exit_code=0, duration_ms=1, backend="local"), recorder, rest
    )
    stored = Execution.objects.get(pk=execution_id)
    assert (ended.status, stored.status, stored.last_seq, stored.output_bytes) == (
        "lost",
        "lost",
        2,
        11,
    )
    assert stored.output_text("stdout") == "first\nlate\n"


def test_a_burst_is_told_by_where_it_ends_and_small_writes_carry_their_chunks(
    agent_and_token, monkeypatch
):
    from executions import output
    from executions.models import OutputChunk

    told = []
    monkeypatch.setattr(output, "broadcast_on_commit", lambda group, message: told.append(message))
    execution_id = submit(agent_and_token[0], PRINT_LINE).proposal.execution_id
    recorder = output.ExecutionRecorder(execution_id, cap_bytes=1 << 30)
    recorder.stop()
    line = "x" * 1023 + "\n"
    small = [OutputChunk(execution_id=execution_id, seq=1, stream="stdout", data=line)]
    burst = [
        OutputChunk(execution_id=execution_id, seq=seq, stream="stdout", data=line * 64)
        for seq in range(2, 2 + output.CARRIED_CHARS // (64 * 1024) + 1)
    ]
    with transaction.atomic():
        recorder.store(small)
        recorder.store(burst)
    assert told[0] == {
        "type": "output.chunks",
        "last_seq": 1,
        "chunks": [{"seq": 1, "stream": "stdout", "data": line}],
    }
    assert told[1] == {"type": "output.chunks", "last_seq": burst[-1].seq, "chunks": []}
    assert OutputChunk.objects.filter(execution_id=execution_id).count() == 1 + len(burst)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scripts_allowed", "local_sandbox")
async def test_output_told_but_not_carried_reaches_a_follower_as_it_comes(
    agent_and_token, monkeypatch
):
    """Every write only says where its chunks end: the follower reads them, live."""
    from executions import consumers, output

    agent, token = agent_and_token
    monkeypatch.setattr(output, "CARRIED_CHARS", 0)
    monkeypatch.setattr(consumers, "SAFETY_SECONDS", 3600)  # only the messages can bring them
    execution_id = await approved_execution(agent)
    communicator = connect(execution_id, token)
    assert (await communicator.connect())[0]
    worker = threading.Thread(target=services.run, args=[execution_id])
    worker.start()
    try:
        first = await receive_until(communicator, lambda m, ms: m["type"] == "chunk")
        running_at_first_chunk = worker.is_alive()
        rest = await receive_until(communicator, lambda m, ms: m["type"] == "status")
    finally:
        await asyncio.to_thread(worker.join)
        await communicator.disconnect()
    assert running_at_first_chunk  # told as it was written, not read at the end
    chunks = [m for m in first + rest if m["type"] == "chunk"]
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert "".join(c["data"] for c in chunks) == EXPECTED
    assert rest[-1]["status"] == "succeeded"


@pytest.mark.django_db(transaction=True)
async def test_a_tool_calls_follower_reads_chunks_told_but_not_carried(agent_and_token):
    from approvals.agents.mcp.follow import OutputFollower
    from executions.models import OutputChunk

    execution_id = (
        await database_sync_to_async(submit)(agent_and_token[0], PRINT_LINE)
    ).proposal.execution_id
    await database_sync_to_async(OutputChunk.objects.bulk_create)(
        [
            OutputChunk(execution_id=execution_id, seq=seq, stream="stdout", data=f"{seq}\n")
            for seq in (1, 2, 3)
        ]
    )
    passed = []

    async def on_chunk(chunk):
        passed.append(chunk["seq"])

    follower = OutputFollower(execution_id, on_chunk, after=1)
    await follower._handle({"type": "output.chunks", "last_seq": 1, "chunks": []})
    assert passed == []  # nothing past what it saw
    await follower._handle({"type": "output.chunks", "last_seq": 3, "chunks": []})
    assert passed == [2, 3]
