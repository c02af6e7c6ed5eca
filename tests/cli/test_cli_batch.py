"""``airlock approve|reject ID...`` deciding several proposals in one call, and ``airlock queue``
saying what each proposal does, where, why the agent wants it and what makes it risky."""

from __future__ import annotations

import json

from tests.cli.test_cli import (  # noqa: F401 - fixtures
    MEDIUM,
    agent_shell,
    deployment,
    one_line,
    reviewer_shell,
)

CLEANUP = "import os\nimport shutil\n\nprint('freeing space')\nshutil.rmtree('/srv/cache/tmp')\n"


def propose(server, body: dict) -> dict:
    status, made = server.api("POST", "/api/v1/proposals", body)
    assert status == 201, made
    return made


def medium(server, n: int) -> dict:
    made = propose(
        server,
        {
            "action": "script.execute",
            "parameters": {"language": "python", "code": MEDIUM + f"# {n}\n"},
            "reason": f"batch {n}",
        },
    )
    assert made["status"] == "pending", made
    return made


def test_several_ids_are_decided_in_one_call_each_with_its_result(
    deployment,  # noqa: F811
    reviewer_shell,  # noqa: F811
):
    made = [medium(deployment, n) for n in range(3)]
    ids = [str(p["id"]) for p in made]
    result = reviewer_shell("approve", *ids, "-m", "all three")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"Proposal #{pk}: approved" for pk in ids]
    again = reviewer_shell("reject", ids[0], "999999", "-m", "too late", "--json")
    assert again.returncode == 8, again.stderr  # the first refusal's code: already decided
    results = json.loads(again.stdout)["results"]
    assert [r["error"]["type"] for r in results] == ["conflict", "not_found"]
    plain = reviewer_shell("reject", "999998", ids[1], "-m", "no")
    assert plain.returncode == 7
    assert plain.stdout.splitlines()[0].startswith("Proposal #999998: not decided: ")
    assert one_line(plain) == "airlock: 2 of 2 proposals not decided"


def test_an_agent_token_may_decide_nothing_in_a_batch(
    deployment,  # noqa: F811
    agent_shell,  # noqa: F811
):
    made = [medium(deployment, n) for n in (10, 11)]
    refused = agent_shell("approve", *(str(p["id"]) for p in made))
    assert refused.returncode == 6
    assert "only reviewers can approve or reject" in one_line(refused)


def test_bad_ids_are_a_usage_error(reviewer_shell):  # noqa: F811
    for args in (["approve"], ["approve", "0"], ["approve", "x"], ["reject", "3", "-1"]):
        result = reviewer_shell(*args, "-m", "no")
        assert result.returncode == 2, (args, result.stderr)


def test_the_queue_says_what_where_and_why(deployment, reviewer_shell):  # noqa: F811
    script = propose(
        deployment,
        {
            "action": "script.execute",
            "parameters": {"language": "python", "code": CLEANUP},
            "reason": "free disk on db-prod-1, WAL filled the volume",
        },
    )
    assert script["summary"] == "python: shutil.rmtree('/srv/cache/tmp')"
    shown = reviewer_shell("queue", "--search", "WAL filled")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "python: shutil.rmtree('/srv/cache/tmp')" in text
    assert "why: free disk on db-prod-1, WAL filled the volume" in text
    assert "! uses shutil.rmtree (deletes directory trees)" in text
    assert "starts at risk" not in text
