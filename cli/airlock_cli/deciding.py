"""``airlock approve|reject ID...``: one proposal, or several in one call (each decided by its
own rules, one result each), and the wait for a second factor proved in the browser."""

from __future__ import annotations

import sys
import time

import click

from airlock_cli.client import (
    CONFLICT,
    FAILED,
    FORBIDDEN,
    NOT_FOUND,
    STEP_UP_PENDING,
    Api,
    CliError,
    StepUpRequired,
)
from airlock_cli.output import emit, say

WAIT_STEP = 30  # seconds per long-poll call
# A batch's refusals as exit codes, the first one's wins (the same as a single decision's).
CODE_OF = {
    "not_found": NOT_FOUND,
    "conflict": CONFLICT,
    "permission_denied": FORBIDDEN,
    "not_a_required_reviewer": FORBIDDEN,
    "step_up_required": STEP_UP_PENDING,
}


def decide(client: Api, kind: str, ids: tuple[int, ...], comment: str, timeout: float, as_json):
    ids = tuple(dict.fromkeys(ids))
    if len(ids) == 1:
        _decide_one(client, kind, ids[0], comment, timeout, as_json)
    else:
        _decide_many(client, kind, ids, comment, timeout, as_json)


def _decide_one(client: Api, kind: str, proposal_id: int, comment: str, timeout: float, as_json):
    try:
        proposal = client.post(f"proposals/{proposal_id}/{kind}", {"comment": comment})
    except StepUpRequired as needed:
        proposal = _after_step_up(client, [proposal_id], needed.message, needed.url, timeout)[0]
    except CliError as refused:
        if refused.error_type != "not_a_required_reviewer" or as_json:
            raise  # --json keeps the API's message, for scripts
        still = refused.message.removeprefix("it ")  # "needs 1 approval from dba (alice, bob)"
        raise CliError(
            refused.code,
            f"you are not a required reviewer of proposal #{proposal_id}: it {still}",
            error_type=refused.error_type,
        ) from None
    if as_json:
        emit(proposal)
        return
    left = proposal["approvals_remaining"]
    more = f"; {left} more approval(s) needed" if proposal["status"] == "pending" else ""
    click.echo(f"Proposal #{proposal_id}: {proposal['status']}{more}")


def _decide_many(client: Api, kind: str, ids: tuple[int, ...], comment: str, timeout, as_json):
    results = client.post(f"proposals/{kind}", {"ids": list(ids), "comment": comment})["results"]
    unproved = [r for r in results if r.get("error", {}).get("type") == "step_up_required"]
    late = None
    if unproved:
        first = unproved[0]["error"]
        message = f"{len(unproved)} of these need it (risk at or above the step-up level)"
        try:
            decided = _after_step_up(
                client, [r["id"] for r in unproved], message, first.get("url", ""), timeout
            )
        except CliError as error:
            late = error  # the results say which wait for it
        else:
            now = {p["id"]: p["status"] for p in decided}
            for result in unproved:
                result.pop("error")
                result["status"] = now[result["id"]]
    refused = [r["error"] for r in results if "error" in r]
    if refused and late is None:
        late = CliError(
            CODE_OF.get(refused[0]["type"], FAILED),
            f"{len(refused)} of {len(results)} proposals not decided",
            error_type=refused[0]["type"],
        )
    _finish(results, as_json, late)


def _finish(results: list[dict], as_json: bool, error: CliError | None) -> None:
    """A line per proposal (or, with --json, one document of results), then the exit code of
    the first refusal: with --json as the code alone, the results saying why."""
    if as_json:
        emit({"results": results})
        if error:
            sys.exit(error.code)
        return
    for result in results:
        if "error" in result:
            click.echo(f"Proposal #{result['id']}: not decided: {result['error']['message']}")
        else:
            click.echo(f"Proposal #{result['id']}: {result['status']}")
    if error:
        raise error


def _after_step_up(client: Api, ids: list[int], message: str, url: str, timeout: float):
    """Print where to prove a second factor, and wait until each of ``ids`` is decided
    there: their proposals as they are then."""
    seen = {pk: _state(client.get(f"proposals/{pk}")) for pk in ids}
    say(f"A fresh second factor is needed: {message}")
    say(f"Finish in the browser: {url}")
    if timeout <= 0:
        raise CliError(STEP_UP_PENDING, "not decided: finish it at the address above", url=url)
    say(f"Waiting up to {int(timeout)} s for it…")
    deadline = time.monotonic() + timeout
    decided: dict[int, dict] = {}
    while (left := deadline - time.monotonic()) > 0:
        pk = next(pk for pk in ids if pk not in decided)
        wait = min(WAIT_STEP, max(int(left), 1))
        proposal = client.call(
            "GET", f"proposals/{pk}", params={"wait": wait, "until": "change"}, wait=wait
        ).json()
        if _state(proposal) != seen[pk]:
            decided[pk] = proposal
            if len(decided) == len(ids):
                return [decided[pk] for pk in ids]
    raise CliError(STEP_UP_PENDING, "not decided in time: finish it at the address above", url=url)


def _state(proposal: dict) -> tuple:
    return proposal["status"], proposal["approvals"]
