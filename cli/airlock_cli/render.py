"""What a person reads: the queue as a table, a proposal as a page (the script highlighted)."""

from __future__ import annotations

import datetime as dt
import json

from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

BAND_STYLES = (("green", 3), ("yellow", 6), ("bold red", 10))


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def risk_text(score: int) -> Text:
    style = next((style for style, high in BAND_STYLES if score <= high), "bold red")
    return Text(str(score), style=style)


def age(created_at: str, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    seconds = max(int((now - dt.datetime.fromisoformat(created_at)).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def needed(item: dict) -> str:
    if item["status"] != "pending":
        return item["status"]
    return f"{item['approvals']} of {item['required_approvals']}"


def teams_owed(item: dict) -> str:
    """A routed proposal's approvals per team, given of needed (``dba 0/1, sre 1/1``); ""
    when no route applies (or the server predates review routes)."""
    reviews = item.get("required_reviews") or []
    return ", ".join(f"{r['team']} {r['given']}/{r['needed']}" for r in reviews)


def queue_table(items: list[dict], title: str) -> Table:
    """The queue; a Teams column only when a row's proposal is routed."""
    routed = any(item.get("required_reviews") for item in items)
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("ID", justify="right", style="bold")
    table.add_column("Risk", justify="right")
    table.add_column("Action")
    table.add_column("What and why", overflow="fold", max_width=70)
    table.add_column("Agent")
    table.add_column("Age", justify="right")
    table.add_column("Approvals", justify="right")
    if routed:
        table.add_column("Teams")
    for item in items:
        cells = [
            str(item["id"]),
            risk_text(item["risk"]["score"]),
            action_and_target(item),
            what_and_why(item),
            item["agent"],
            age(item["created_at"]),
            needed(item),
        ]
        table.add_row(*cells, *([teams_owed(item)] if routed else []))
    return table


def action_and_target(item: dict) -> Text:
    """The action, and under it what it acts on (a container, a host and service, a tool)."""
    cell = Text(item["action"])
    target = " · ".join(f"{kind} {value}" for kind, value in (item.get("target") or {}).items())
    if target:
        cell.append(f"\n{target}", style="dim")
    return cell


def what_and_why(item: dict) -> Text:
    """The summary (the line that matters, or the call), the agent's reason, the one or two
    strongest risk reasons: what a reviewer decides on without opening the proposal."""
    cell = Text(item["summary"] or item["action"])
    if item.get("reason"):
        cell.append(f"\nwhy: {one_line(item['reason'], 140)}", style="italic")
    for reason in item["risk"].get("top", []):
        cell.append(f"\n! {reason}", style="red")
    return cell


def one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def executions_table(items: list[dict]) -> Table:
    table = Table(title="Executions", title_justify="left")
    for name, justify in (
        ("ID", "right"),
        ("Proposal", "right"),
        ("Action", "left"),
        ("Agent", "left"),
        ("Status", "left"),
        ("Exit", "right"),
        ("Took", "right"),
        ("Age", "right"),
    ):
        table.add_column(name, justify=justify)
    for item in items:
        took = f"{item['duration_ms'] / 1000:.1f}s" if item["duration_ms"] is not None else ""
        table.add_row(
            str(item["id"]),
            str(item["proposal_id"] or ""),
            item["action"],
            item["agent"] or "",
            item["status"],
            "" if item["exit_code"] is None else str(item["exit_code"]),
            took,
            age(item["created_at"]),
        )
    return table


def proposal_page(proposal: dict, execution: dict | None = None) -> Group:
    risk = proposal["risk"]
    head = Text.assemble(
        (f"Proposal #{proposal['id']}", "bold"),
        "  ",
        (proposal["status"].upper(), "bold"),
        "  risk ",
        risk_text(risk["score"]),
        f"  ·  {proposal['action']}  ·  by {proposal['agent']}  ·  {proposal['created_at']}",
    )
    parts: list = [head]
    if proposal["summary"]:
        parts.append(Text(proposal["summary"]))
    if proposal["reason"]:
        parts.append(Text.assemble(("Reason: ", "bold"), proposal["reason"]))
    if risk["reasons"]:
        reasons = Text("\n").join(Text(f"  • {reason}") for reason in risk["reasons"])
        parts.append(Text.assemble(("Why this risk:\n", "bold"), reasons))
    parameters = dict(proposal["parameters"])
    code = parameters.pop("code", None) if proposal["action"].startswith("script.") else None
    if code is not None:
        language = parameters.get("language", "text")
        lexer = {"sh": "bash", "shell": "bash", "node": "javascript"}.get(language, language)
        parts.append(Panel(Syntax(code, lexer, line_numbers=True), title=f"{language} script"))
    if parameters:
        parts.append(Panel(Syntax(json.dumps(parameters, indent=2), "json"), title="Parameters"))
    parts.append(Text.assemble(("Decision path: ", "bold"), describe_path(proposal)))
    if proposal.get("required_reviews"):
        parts.append(required_reviews(proposal))
    if proposal["status"] == "pending":
        parts.append(
            Text(
                f"Waiting for {proposal['approvals_remaining']} more approval(s) of "
                f"{proposal['required_approvals']}; expires {proposal['expires_at'] or 'never'}"
            )
        )
    if proposal["status"] == "withdrawn":  # a final state, like expired, by the agent's hand
        why = proposal.get("withdraw_reason") or "no reason given"
        when = proposal.get("decided_at") or "?"
        parts.append(Text(f"Withdrawn by {proposal['agent']} at {when}: {why}"))
    for decision in proposal["decisions"]:
        comment = f": {decision['comment']}" if decision["comment"] else ""
        parts.append(
            Text(
                f"  {decision['kind']}d by {decision['reviewer']} at {decision['created_at']}{comment}"
            )
        )
    if execution is not None:
        code_text = (
            "" if execution["exit_code"] is None else f", exit code {execution['exit_code']}"
        )
        parts.append(
            Text(
                f"Execution #{execution['id']}: {execution['status']}{code_text} (airlock watch {execution['id']})"
            )
        )
    return Group(*parts)


def required_reviews(proposal: dict) -> Text:
    """Per team of the proposal's review route: given of needed, who gave them, and who may
    still give them (a member who decided it already may not)."""
    route = (proposal.get("decision_path") or {}).get("route")
    decided = {decision["reviewer"] for decision in proposal["decisions"]}
    lines = []
    for review in proposal["required_reviews"]:
        said = []
        if review["approved_by"]:
            said.append(f"approved by {', '.join(review['approved_by'])}")
        if review["given"] < review["needed"]:
            left = [name for name in review["members"] if name not in decided]
            said.append(f"may decide: {', '.join(left) or 'nobody'}")
        counted = f"{review['team']} {review['given']}/{review['needed']}"
        lines.append(Text(f"  • {counted}: {'; '.join(said)}"))
    head = f"Teams: {teams_owed(proposal)}" + (f" ({route})" if route else "")
    return Text.assemble((head, "bold"), "\n", Text("\n").join(lines))


def describe_path(proposal: dict) -> str:
    path = proposal.get("decision_path") or {}
    step = path.get("step", "")
    detail = path.get("detail") or path.get("reason") or ""
    version = path.get("policy_version", proposal.get("policy_version"))
    words = [step or "—"]
    if detail:
        words.append(f"({detail})")
    if version:
        words.append(f"under policy v{version}")
    return " ".join(words)
