"""The ``airlock`` command: Airlock's queue, decisions, runs and policy from the terminal."""

from __future__ import annotations

import functools
import json
import sys
import time

import click

from airlock_cli import config, deciding, hooks, render, stream
from airlock_cli.client import (
    CHAIN_BROKEN,
    DECIDED_AGAINST,
    EXIT_CODES,
    FAILED,
    NOT_DECIDED,
    STEP_UP_PENDING,
    Api,
    CliError,
    StepUpRequired,
    fail,
)
from airlock_cli.deciding import WAIT_STEP
from airlock_cli.output import emit, say

ENDED = ("denied", "rejected", "expired", "withdrawn")
EPILOG = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>2}  {text}" for code, text in EXIT_CODES.items()
)


def command(group: click.Group, name: str | None = None, **kwargs):
    """A subcommand with ``--json``, whose ``CliError`` is one line and its exit code."""

    def wrap(function):
        @group.command(name, epilog=EPILOG, **kwargs)
        @click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")
        @functools.wraps(function)
        def run(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except CliError as error:
                if kwargs.get("as_json"):  # the API's error shape, for scripts
                    body = {"type": error.error_type or "cli", "message": error.message}
                    print(json.dumps({"error": body | ({"url": error.url} if error.url else {})}))
                fail(error)

        return run

    return wrap


def api() -> Api:
    login = config.load()
    return Api(login["url"], login["token"])


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="airlock")
def cli():
    """Airlock from the terminal: the review queue, decisions, runs behind approval, policy.

    Log in once with `airlock login URL` (or set AIRLOCK_URL and AIRLOCK_TOKEN).
    """


# --- login ---------------------------------------------------------------------------


@command(cli)
@click.argument("url")
@click.option(
    "--token",
    envvar="AIRLOCK_TOKEN",
    help="An agent's token or your personal token (Profile → Tokens); `-` reads it from "
    "standard input; asked for when not given.",
)
def login(url: str, token: str | None, as_json: bool):
    """Check a token against URL and keep both for the next commands (a 0600 file)."""
    if token == "-":
        token = sys.stdin.readline().strip()
    elif not token:
        token = click.prompt("Token", hide_input=True).strip()
    if not url.startswith(("http://", "https://")):
        raise CliError(FAILED, f"URL must start with http:// or https://, got {url!r}")
    who = Api(url, token).get("capabilities")
    kind = (
        "an agent" if who.get("capabilities") else "a reviewer" if who.get("reviewer") else "a user"
    )
    where = config.save(url, token, who["principal"])
    if as_json:
        emit({"url": url.rstrip("/"), "principal": who["principal"], "config": str(where)})
    else:
        click.echo(
            f"Logged in to {url.rstrip('/')} as {who['principal']} ({kind}); kept in {where}"
        )


@command(cli)
def logout(as_json: bool):
    """Forget the kept login."""
    forgot = config.forget()
    if as_json:
        emit({"forgotten": forgot})
    else:
        click.echo("Logged out." if forgot else "Not logged in.")


# --- the queue -----------------------------------------------------------------------


@command(cli)
@click.option(
    "--status", default="pending", show_default=True, help="Comma-separated statuses, or `all`."
)
@click.option("--risk", help="Risk bands: low, medium, high (comma-separated).")
@click.option("--agent", help="Only this agent's proposals.")
@click.option("--action", help="Only these actions: a name or a glob (docker.*).")
@click.option("--search", "-q", help="Text in the summary or reason.")
@click.option("--limit", type=click.IntRange(1, 200), default=50, show_default=True)
@click.option(
    "--mine",
    is_flag=True,
    help="Only what waits for you: the pending proposals you may still decide (a review "
    "route that needs a team of yours, or none), not those you decided.",
)
def queue(status, risk, agent, action, search, limit, mine, as_json):
    """The pending queue, riskiest first (any statuses with --status, yours with --mine)."""
    if mine and status != "pending":
        raise click.UsageError("--mine lists pending proposals only: leave out --status")
    params = {
        "status": None if status == "all" else status,
        "risk": risk,
        "agent": agent,
        "action": action,
        "q": search,
        "limit": limit,
        "review_requested": "me" if mine else None,
    }
    page = api().get("proposals", **params)
    if as_json:
        emit(page)
        return
    items = page["items"]
    if mine:
        title = "Waiting for you"
    else:
        title = "Pending queue" if status == "pending" else f"Proposals ({status})"
    if not items:
        click.echo(f"{title}: nothing.")
        return
    out = render.console()
    out.print(
        render.queue_table(items, f"{title} — {len(items)}{'+' if page['next_cursor'] else ''}")
    )


@command(cli)
@click.option("--status", help="Comma-separated: queued, running, succeeded, failed, …")
@click.option("--agent", help="Only this agent's executions.")
@click.option("--limit", type=click.IntRange(1, 200), default=20, show_default=True)
def executions(status, agent, limit, as_json):
    """Recent executions, newest first."""
    page = api().get("executions", status=status, agent=agent, limit=limit)
    if as_json:
        emit(page)
    elif not page["items"]:
        click.echo("No executions.")
    else:
        render.console().print(render.executions_table(page["items"]))


@command(cli)
@click.argument("proposal_id", type=int)
def show(proposal_id: int, as_json: bool):
    """A proposal: why its risk, the script highlighted, the decision path and decisions."""
    client = api()
    proposal = client.get(f"proposals/{proposal_id}")
    execution = None
    if proposal["execution_id"]:
        execution = client.get(f"executions/{proposal['execution_id']}")
    if as_json:
        emit({"proposal": proposal, "execution": execution})
    else:
        render.console().print(render.proposal_page(proposal, execution))


# --- deciding --------------------------------------------------------------------------


STEP_UP_OPTION = click.option(
    "--step-up-timeout",
    type=float,
    default=600,
    show_default=True,
    help="When a second factor is needed: seconds to wait for it in the browser (0: do not wait).",
)


@command(cli)
@click.argument(
    "proposal_ids", metavar="PROPOSAL_ID...", type=click.IntRange(min=1), nargs=-1, required=True
)
@click.option("-m", "--message", "comment", default="", help="A comment for the audit trail.")
@STEP_UP_OPTION
def approve(proposal_ids: tuple[int, ...], comment: str, step_up_timeout: float, as_json: bool):
    """Approve one proposal or several (reviewers; a fresh second factor at high risk, one
    for all of them)."""
    deciding.decide(api(), "approve", proposal_ids, comment, step_up_timeout, as_json)


@command(cli)
@click.argument(
    "proposal_ids", metavar="PROPOSAL_ID...", type=click.IntRange(min=1), nargs=-1, required=True
)
@click.option(
    "-m", "--message", "comment", required=True, help="Why: for the agent and the audit trail."
)
@STEP_UP_OPTION
def reject(proposal_ids: tuple[int, ...], comment: str, step_up_timeout: float, as_json: bool):
    """Reject one proposal or several, saying why."""
    deciding.decide(api(), "reject", proposal_ids, comment, step_up_timeout, as_json)


@command(cli)
@click.argument("proposal_id", type=int)
@click.option(
    "--reason", default="", help="Why it is no longer needed: for reviewers and the audit trail."
)
def withdraw(proposal_id: int, reason: str, as_json: bool):
    """Withdraw a pending proposal (the agent that made it, with its token): nothing runs."""
    proposal = api().post(f"proposals/{proposal_id}/withdraw", {"reason": reason})
    if as_json:
        emit(proposal)
        return
    why = f": {proposal['withdraw_reason']}" if proposal.get("withdraw_reason") else ""
    click.echo(f"Proposal #{proposal_id}: {proposal['status']}{why}")


# --- runs ------------------------------------------------------------------------------


def _exit_code_of(client: Api, execution_id: int) -> tuple[dict, int]:
    result = client.get(f"executions/{execution_id}")
    code = result["exit_code"]
    return result, code if code is not None else (0 if result["status"] == "succeeded" else FAILED)


@command(cli)
@click.argument("execution_id", type=int)
@click.option("--after", type=int, default=0, help="Start after this chunk (resume).")
def watch(execution_id: int, after: int, as_json: bool):
    """Stream an execution's output live; exit with its exit code."""
    client = api()
    client.get(f"executions/{execution_id}")  # 404/403 as one line before the socket
    printer = stream.print_json_chunk if as_json else stream.print_chunk
    stream.follow(client.url, client.token, execution_id, printer, after=after)
    result, code = _exit_code_of(client, execution_id)
    if as_json:
        emit({k: v for k, v in result.items() if k not in ("stdout", "stderr")})
    elif result["status"] != "succeeded":
        click.echo(f"airlock: execution #{execution_id} {result['status']}", err=True)
    sys.exit(code)


@command(cli)
@click.argument("script", type=click.File("r"))
@click.option(
    "--lang", "language", default="python", show_default=True, help="The script's language."
)
@click.option("--reason", default="", help="Why it should run: reviewers read this.")
@click.option("--urgency", type=click.Choice(["low", "normal", "high"]), default="normal")
@click.option(
    "--timeout", "decision_timeout", type=float, default=3600, show_default=True,
    help="Seconds to wait for a decision (and, before it, for a place when the agent has "
    "too many proposals pending or proposes too fast).",
)  # fmt: skip
def run(script, language, reason, urgency, decision_timeout, as_json):
    """Propose a script (FILE or - for standard input), wait for approval, stream it, exit with its code.

    With an agent's token: the way a shell script or a CI job puts a step behind approval.
    Refused for now (429), it proposes again after the server's Retry-After; a paused
    agent (423) exits 13 at once.
    """
    code = script.read()
    client = api()
    body = {
        "action": "script.execute",
        "parameters": {"language": language, "code": code},
        "reason": reason,
        "urgency": urgency,
    }
    deadline = time.monotonic() + decision_timeout
    proposal = client.propose(body, wait=1, patience=decision_timeout)
    if proposal["status"] == "pending":
        say(
            f"Proposal #{proposal['id']} (risk {proposal['risk']['score']}) waits for a reviewer: "
            f"{client.url}/proposals/{proposal['id']}/"
        )
    while proposal["status"] == "pending":
        left = deadline - time.monotonic()
        if left <= 0:
            raise CliError(
                NOT_DECIDED, f"proposal #{proposal['id']} was not decided in {decision_timeout:g} s"
            )
        wait = min(WAIT_STEP, max(int(left), 1))
        proposal = client.call(
            "GET",
            f"proposals/{proposal['id']}",
            params={"wait": wait, "until": "decided"},
            wait=wait,
        ).json()
    if proposal["status"] in ENDED:
        why = "; ".join(d["comment"] for d in proposal["decisions"] if d["comment"])
        if proposal["status"] == "withdrawn":
            why = proposal.get("withdraw_reason") or "by the agent"
        why = why or "; ".join(proposal["risk"]["reasons"][:1]) or proposal["status"]
        if as_json:
            emit({"proposal": proposal})
        raise CliError(DECIDED_AGAINST, f"proposal #{proposal['id']} {proposal['status']}: {why}")
    execution_id = proposal["execution_id"]
    if not as_json:
        say(f"Approved; execution #{execution_id}:")
    printer = stream.print_json_chunk if as_json else stream.print_chunk
    stream.follow(client.url, client.token, execution_id, printer)
    result, exit_code = _exit_code_of(client, execution_id)
    if as_json:
        emit(
            {
                "proposal": proposal,
                "execution": {k: v for k, v in result.items() if k not in ("stdout", "stderr")},
            }
        )
    elif result["status"] != "succeeded":
        say(f"airlock: execution #{execution_id} {result['status']}")
    sys.exit(exit_code)


# --- policy ----------------------------------------------------------------------------


@cli.group(epilog=EPILOG)
def policy():
    """Export, simulate and apply the allow/notify/deny policy (policy as code)."""


@command(policy, "export")
@click.option(
    "--version", "version", type=int, help="A stored version (default: the one in force)."
)
def policy_export(version, as_json):
    """Print the policy as YAML."""
    client = api()
    text = client.call(
        "GET", "policy/export", params={"version": version}, accept="application/yaml"
    ).text
    if as_json:
        emit({"text": text})
    else:
        click.echo(text, nl=False)


@command(policy, "simulate")
@click.argument("file", type=click.File("r"))
@click.option(
    "--last", type=click.IntRange(1), default=200, show_default=True, help="Proposals to replay."
)
def policy_simulate(file, last, as_json):
    """How the last proposals would move under the policy in FILE; nothing is saved."""
    result = api().post("policy/simulate", {"text": file.read(), "last": last})
    if as_json:
        emit(result)
        return
    for change in result.get("changes", []):
        click.echo(f"change: {change}")
    click.echo(f"{result.get('moved', 0)} of {result.get('considered', 0)} proposals would move")
    for move in result.get("moves", []):
        click.echo(f"  {move['count']:>4}  {move['from']} → {move['to']}")


@command(policy, "apply")
@click.argument("file", type=click.File("r"))
@click.option("-m", "--message", "comment", default="", help="Why: kept with the version.")
@STEP_UP_OPTION
def policy_apply(file, comment, step_up_timeout, as_json):
    """Put the policy in FILE in force (admins; a fresh second factor, in the browser)."""
    client = api()
    before = client.get("policy/versions")["versions"]
    newest = before[0]["version"] if before else 0
    try:
        result = client.post("policy/apply", {"text": file.read(), "comment": comment})
    except StepUpRequired as needed:
        say(f"A fresh second factor is needed: {needed.message}")
        say(f"Review and apply it in the browser: {needed.url}")
        deadline = time.monotonic() + step_up_timeout
        while time.monotonic() < deadline:
            versions = client.get("policy/versions")["versions"]
            if versions and versions[0]["version"] > newest:
                result = {"version": versions[0]["version"], "comment": versions[0]["comment"]}
                break
            time.sleep(2)
        else:
            raise CliError(
                STEP_UP_PENDING, "not applied: finish it at the address above", url=needed.url
            ) from None
    if as_json:
        emit(result)
    else:
        click.echo(f"Policy version {result['version']} is in force.")


# --- audit -----------------------------------------------------------------------------


@cli.group(epilog=EPILOG)
def audit():
    """Verify and export the hash-chained audit trail (admins)."""


@command(audit, "verify")
def audit_verify(as_json):
    """Check every row of the chain with the server's key; exit 12 if one was tampered with."""
    report = api().get("audit/verify")
    if as_json:
        emit(report)
    if not report["ok"]:
        raise CliError(
            CHAIN_BROKEN,
            f"the audit chain is broken at row {report['first_bad_seq']}: {report['problem']} "
            f"({report['checked']} rows before it are sound)",
        )
    if not as_json:
        click.echo(f"Audit chain intact: {report['checked']} events checked.")


@command(audit, "export")
@click.option("--after", type=int, default=0, help="Start after this sequence number.")
@click.option(
    "-o", "--output", type=click.File("w"), default="-", help="A file (default: standard output)."
)
def audit_export(after, output, as_json):
    """Every event after --after, in order, as JSON lines (with their hashes)."""
    client = api()
    written = 0
    while after is not None:
        page = client.get("audit", after=after)
        for event in page["events"]:
            output.write(json.dumps(event) + "\n")
            written += 1
        after = page["next_after"]
    output.flush()
    if output is not sys.stdout:
        click.echo(f"{written} events written to {output.name}", err=True)


# --- agent hooks ----------------------------------------------------------------------


@cli.group(epilog=EPILOG)
def hook():
    """Permission hooks of coding agents: their tool calls decided in Airlock."""


@hook.command("claude-code")
@click.option(
    "--timeout", type=float, default=300, show_default=True,
    help="Seconds to wait for a reviewer before --on-timeout answers.",
)  # fmt: skip
@click.option(
    "--on-timeout", type=click.Choice(hooks.DECISIONS), default="ask", show_default=True,
    help="The answer when nobody decided in time (ask: Claude Code asks at the terminal).",
)  # fmt: skip
@click.option(
    "--on-error", type=click.Choice(hooks.DECISIONS), default="ask", show_default=True,
    help="The answer when Airlock cannot be asked (not logged in, unreachable, refused).",
)  # fmt: skip
@click.option(
    "--prefix", default="claude-code.", show_default=True,
    help="Put before the tool's name: policy reads tool:claude-code.Bash.",
)  # fmt: skip
def hook_claude_code(timeout, on_timeout, on_error, prefix):
    """Claude Code's PreToolUse and PostToolUse hook: the event as JSON on standard input,
    the decision as JSON on standard output; always exits 0.

    \b
    In .claude/settings.json:
      {"hooks": {
        "PreToolUse": [{"matcher": "*", "hooks": [
          {"type": "command", "command": "airlock hook claude-code", "timeout": 360}]}],
        "PostToolUse": [{"matcher": "*", "hooks": [
          {"type": "command", "command": "airlock hook claude-code"}]}]}}
    """
    try:
        event = json.loads(sys.stdin.read())
    except ValueError:
        event = None
    answer = hooks.claude_code(
        event, api, timeout=timeout, on_timeout=on_timeout, on_error=on_error, prefix=prefix
    )
    if answer is not None:
        print(json.dumps(answer))


def main() -> None:
    try:
        cli.main(prog_name="airlock", standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)
