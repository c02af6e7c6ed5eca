"""Faults on the running deployment: nothing lost, nothing run twice, nothing half-written.

Each test does to a container what happens in production (a process killed
with SIGKILL, a database or Redis restarted, the broker away for 30 s, a web
container killed under load) and checks what agents and browsers see, and
what the database holds, afterwards.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests

from .stack import TERMINAL, Agent, Stack, follow_output, wait_for

BROKER_DOWN_SECONDS = float(os.environ.get("AIRLOCK_SCALE_BROKER_DOWN_SECONDS", "30"))
LONG_POLLING_AGENTS = int(os.environ.get("AIRLOCK_SCALE_AGENTS", "100"))


def psql(stack: Stack, query: str) -> str:
    return stack.docker(
        "exec", stack.container("postgres"), "psql", "-U", "airlock", "-d", "airlock", "-tAc", query
    ).strip()


def counting_script(lines: int, pause: float) -> str:
    return (
        f"import time\nfor i in range(1, {lines + 1}):\n"
        f"    print(f'line {{i}}', flush=True)\n    time.sleep({pause})\n"
    )


def expected_lines(lines: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, lines + 1))


def assert_complete(followed, execution: dict) -> None:
    """Every chunk once, in order, none missing, ending where the execution ended."""
    assert followed.seqs == list(range(1, execution["last_seq"] + 1)), followed.seqs
    assert followed.status["status"] == execution["status"]


def test_a_worker_killed_mid_run_ends_lost_is_not_rerun_and_the_others_carry_on(
    stack: Stack, agent: Agent
):
    marker = uuid.uuid4().hex[:8]
    victim = agent.script(
        f"import time\nprint('{marker} started', flush=True)\ntime.sleep(60)\nprint('{marker} end')",
        timeout_seconds=120,
    )
    running = wait_for(
        lambda: (
            (e := agent.execution(victim["execution_id"]))["status"] == "running"
            and e["stdout"] == f"{marker} started\n"  # stored, not only buffered
            and e
        ),
        60,
        "the victim to run and print",
    )
    host = running["provenance"]["worker_host"]

    os.kill(stack.main_pid(stack.worker(host)), signal.SIGKILL)
    carried_on = [agent.script(f"print('after {i}')") for i in range(6)]

    lost = agent.wait_execution(victim["execution_id"], timeout=90)
    assert lost["status"] == "lost", lost
    assert lost["stdout"] == f"{marker} started\n"
    assert lost["provenance"]["worker_host"] == host
    for i, proposal in enumerate(carried_on):
        execution = agent.wait_execution(proposal["execution_id"])
        assert (execution["status"], execution["stdout"]) == ("succeeded", f"after {i}\n")

    # The killed host's worker is back (restart policy) and still does not re-run it.
    wait_for(lambda: stack.state(stack.worker(host)) == "running", 60, f"{host} to restart")
    after_restart = agent.script("print('host back')")
    assert agent.wait_execution(after_restart["execution_id"])["status"] == "succeeded"
    time.sleep(3)
    again = agent.execution(victim["execution_id"])
    assert (again["status"], again["stdout"], again["started_at"]) == (
        "lost",
        lost["stdout"],
        lost["started_at"],
    )
    assert (
        psql(
            stack, f"select count(*) from executions_execution where id = {victim['execution_id']}"
        )
        == "1"
    )


def test_postgres_restarted_answers_503_writes_nothing_half_and_recovers_without_restarts(
    stack: Stack, agent: Agent
):
    run = uuid.uuid4().hex[:8]
    answers: list[tuple[str, int, dict | None]] = []
    stop = threading.Event()

    def keep_proposing() -> None:
        i = 0
        while not stop.is_set():
            reason = f"pg-{run}-{i}"
            i += 1
            body = {
                "action": "script.execute",
                "parameters": {"language": "python", "code": f"print('{reason}')"},
                "reason": reason,
            }
            response = agent.call("POST", "/api/v1/proposals", json=body, timeout=30)
            answers.append((reason, response.status_code, _json(response)))
            if response.status_code == 503:
                assert response.headers.get("Retry-After")
            time.sleep(0.1)

    # A run that spans the outage and outlives WORKER_LOST_AFTER_SECONDS (30) after it.
    spanning = agent.script(
        f"import time\nprint('{run} before', flush=True)\ntime.sleep(40)\nprint('{run} after')",
        timeout_seconds=90,
    )
    wait_for(
        lambda: agent.execution(spanning["execution_id"])["stdout"] == f"{run} before\n",
        60,
        "the spanning run to start",
    )
    proposer = threading.Thread(target=keep_proposing)
    proposer.start()
    try:
        time.sleep(1)
        stack.docker("stop", "--time", "10", stack.container("postgres"))
        away = agent.call("GET", "/api/v1/proposals/1", timeout=30)
        time.sleep(3)
        stack.docker("start", stack.container("postgres"))
        wait_for(
            lambda: agent.call("GET", "/api/v1/proposals/1", timeout=10).status_code == 200,
            60,
            "the API to answer again",
        )
        time.sleep(1)
    finally:
        stop.set()
        proposer.join(60)

    assert away.status_code == 503, away.text
    assert away.json()["error"]["type"] == "service_unavailable"
    codes = {code for _, code, _ in answers}
    # 200: a proposal sent again with its key after a dropped answer, found, not made again.
    assert codes <= {200, 201, 503}, [(r, c, b) for r, c, b in answers if c not in (200, 201, 503)]
    assert 503 in codes and 201 in codes, codes
    for _, code, body in answers:
        if code == 503:
            assert body["error"]["type"] == "service_unavailable", body
            assert body["error"]["message"]
    # The database holds exactly the accepted ones, each whole: approved with its execution.
    accepted = {reason for reason, code, _ in answers if code in (200, 201)}
    stored = psql(
        stack,
        "select p.reason || ':' || p.status || ':' || coalesce(e.status, '-') "
        "from approvals_proposal p left join executions_execution e on e.id = p.execution_id "
        f"where p.reason like 'pg-{run}-%'",
    ).split()
    assert {row.split(":")[0] for row in stored} == accepted
    assert all(row.split(":")[1] == "approved" and row.split(":")[2] != "-" for row in stored)
    # The run in flight kept its output and its result: its worker waited for the database.
    outlived = agent.wait_execution(spanning["execution_id"], timeout=90)
    assert (outlived["status"], outlived["stdout"]) == ("succeeded", f"{run} before\n{run} after\n")
    # Every accepted one runs, on workers that were never restarted either.
    for reason, code, body in answers:
        if code in (200, 201):
            execution = agent.wait_execution(body["execution_id"], timeout=90)
            assert (execution["status"], execution["stdout"]) == ("succeeded", f"{reason}\n")


def _json(response: requests.Response) -> dict | None:
    try:
        return response.json()
    except ValueError:
        return None


def test_redis_restarted_while_output_streams_loses_and_repeats_nothing(stack: Stack, agent: Agent):
    lines = 50
    proposal = agent.script(counting_script(lines, 0.2), timeout_seconds=60)
    restarted = threading.Event()
    restarter: list[threading.Thread] = []

    def restart_once(followed) -> None:
        if len(followed.chunks) >= 5 and not restarted.is_set():
            restarted.set()
            thread = threading.Thread(
                target=stack.docker, args=("restart", "--time", "2", stack.container("redis"))
            )
            thread.start()
            restarter.append(thread)

    followed = follow_output(
        stack.url, agent.token, proposal["execution_id"], on_chunk=restart_once
    )
    restarter[0].join(60)
    print(f"[scale] redis restart: the client reconnected {followed.reconnects} time(s)")
    queued_after = agent.script("print('queued after the restart')")

    execution = agent.wait_execution(proposal["execution_id"])
    assert restarted.is_set()
    assert execution["status"] == "succeeded", execution
    assert followed.text == expected_lines(lines)
    assert_complete(followed, execution)
    assert agent.wait_execution(queued_after["execution_id"])["status"] == "succeeded"


def test_a_web_container_killed_while_agents_long_poll_misses_nothing(
    stack: Stack, agent: Agent, reviewer: Agent
):
    run = uuid.uuid4().hex[:8]
    held = [
        agent.propose("host.restart_service", service_name=f"w{run}{i}", host="host-b")
        for i in range(LONG_POLLING_AGENTS)
    ]
    streams = [agent.script(counting_script(40, 0.25), timeout_seconds=60) for _ in range(3)]
    outcomes: dict[int, dict] = {}
    dropped: list[int] = []

    def long_poll(proposal: dict) -> None:
        client = Agent(stack.url, agent.token)
        seen = proposal
        while seen["execution_status"] not in TERMINAL:
            try:
                response = client.call(
                    "GET", f"/api/v1/proposals/{seen['id']}?wait=30", retry=False, timeout=40
                )
            except requests.RequestException:
                dropped.append(seen["id"])
                time.sleep(0.2)
                continue
            if response.status_code != 200:
                dropped.append(seen["id"])
                time.sleep(0.2)
                continue
            seen = response.json()
        outcomes[seen["id"]] = seen

    with ThreadPoolExecutor(LONG_POLLING_AGENTS + len(streams)) as pool:
        watchers = [
            pool.submit(follow_output, stack.url, agent.token, s["execution_id"]) for s in streams
        ]
        pollers = [pool.submit(long_poll, p) for p in held]
        time.sleep(3)  # every agent is waiting, on one web container or the other
        stack.docker("kill", stack.container("web", 1))
        time.sleep(3)
        with ThreadPoolExecutor(4) as approvers:
            list(approvers.map(lambda p: reviewer.approve(p["id"]), held))
        for poller in pollers:
            poller.result(timeout=180)
        followed = [w.result(timeout=120) for w in watchers]

    print(
        f"[scale] web kill: {len(set(dropped))} agents' long-polls dropped, "
        f"{sum(f.reconnects for f in followed)} websocket reconnect(s)"
    )
    assert dropped, "no agent was on the killed container: the test proved nothing"
    assert sorted(outcomes) == sorted(p["id"] for p in held)
    assert {o["execution_status"] for o in outcomes.values()} == {"succeeded"}
    log = stack.systemctl_log("host-b")
    assert all(log.count(f"restart w{run}{i}\n") == 1 for i in range(LONG_POLLING_AGENTS))
    for stream, seen in zip(streams, followed, strict=True):
        execution = agent.wait_execution(stream["execution_id"])
        assert seen.text == expected_lines(40)
        assert_complete(seen, execution)


def test_the_broker_away_for_30_s_loses_no_proposal_and_runs_every_approved_one(
    stack: Stack, agent: Agent, reviewer: Agent
):
    run = uuid.uuid4().hex[:8]
    stack.docker("stop", "--time", "5", stack.container("redis"))
    stopped_at = time.monotonic()

    took: list[float] = []

    def propose_until_back(n: int) -> list[dict]:
        made = []
        i = 0
        while time.monotonic() - stopped_at < BROKER_DOWN_SECONDS - 2:
            sent = time.monotonic()
            made.append(agent.script(f"print('{run} {n}-{i}')"))
            took.append(time.monotonic() - sent)
            i += 1
            time.sleep(0.5)
        return made

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(propose_until_back, n) for n in range(3)]
        # A reviewer approves held ones meanwhile.
        held = [
            agent.propose("host.restart_service", service_name=f"u{run}{i}", host="host-a")
            for i in range(3)
        ]
        assert [p["status"] for p in held] == ["pending"] * 3
        approved = [reviewer.approve(p["id"]) for p in held]
        proposed = [p for future in futures for p in future.result()]
    time.sleep(max(0.0, BROKER_DOWN_SECONDS - (time.monotonic() - stopped_at)))
    stack.start(stack.container("redis"))

    print(
        f"[scale] broker away: {len(proposed)} proposals, the slowest answered in {max(took):.1f} s"
    )
    assert all(p["status"] == "approved" for p in proposed + approved)
    assert max(took) < 10, "an approval waited on the broker"
    assert len(proposed) >= 6
    for proposal in proposed:
        execution = agent.wait_execution(proposal["execution_id"], timeout=90)
        assert execution["status"] == "succeeded", execution
        assert execution["stdout"].count(run) == 1
    for proposal in approved:
        execution = agent.wait_execution(proposal["execution_id"], timeout=60)
        assert execution["status"] == "succeeded", execution
    log = stack.systemctl_log("host-a")
    for i in range(3):
        assert log.count(f"restart u{run}{i}\n") == 1
