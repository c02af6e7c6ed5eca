"""Policy as code from the shell.

    manage.py policy export [--version N]           the policy as YAML on stdout
    manage.py policy apply FILE [--comment TEXT]    put FILE in force (a new, audited version)
    manage.py policy simulate FILE [--last N]       how the last N proposals would move

FILE may be ``-`` for stdin. ``apply`` writes nothing when the file has a fault;
every fault is reported with its line and field.
"""

from __future__ import annotations

import getpass
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.policy import simulation
from approvals.policy import text as policy_text


class Command(BaseCommand):
    help = "Export, apply or simulate the policy as YAML."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="subcommand", required=True)
        export = commands.add_parser("export", help="print the policy as YAML")
        export.add_argument("--version", type=int, help="a stored version (default: in force)")
        apply = commands.add_parser("apply", help="put a YAML policy in force")
        apply.add_argument("file", help="a YAML policy file, or - for stdin")
        apply.add_argument("--comment", default="", help="why, for the audit trail")
        simulate = commands.add_parser("simulate", help="preview a YAML policy against history")
        simulate.add_argument("file", help="a YAML policy file, or - for stdin")
        simulate.add_argument("--last", type=int, default=simulation.DEFAULT_LAST)

    def handle(self, *args, subcommand: str, **options) -> None:
        getattr(self, f"_{subcommand}")(**options)

    def _export(self, version: int | None = None, **_) -> None:
        try:
            self.stdout.write(policy_text.version_text(version), ending="")
        except KeyError:
            raise CommandError(f"there is no policy version {version}") from None

    def _apply(self, file: str, comment: str = "", **_) -> None:
        text = read_file(file)
        try:
            version = policy_text.apply_text(text, comment=comment, actor=cli_actor())
        except policy_text.PolicyTextError as exc:
            raise CommandError(_problems(file, exc)) from None
        self.stdout.write(f"policy version {version.version} is now in force")

    def _simulate(self, file: str, last: int = simulation.DEFAULT_LAST, **_) -> None:
        if last < 1:
            raise CommandError("--last must be at least 1")
        try:
            draft = policy_text.parse(read_file(file))
        except policy_text.PolicyTextError as exc:
            raise CommandError(_problems(file, exc)) from None
        self.stdout.write(report(simulation.simulate(draft, last)))


def read_file(file: str) -> str:
    """A file's text, or stdin's for ``-``; ``CommandError`` saying why not."""
    if file == "-":
        return sys.stdin.read()
    try:
        with open(file, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {file}: {exc}") from None


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid
        return "cli"


def _problems(file: str, exc: policy_text.PolicyTextError) -> str:
    return f"{file} was not applied:\n" + "\n".join(f"  {p}" for p in exc.problems)


def report(preview: simulation.Preview) -> str:
    """The preview as a few lines of text."""
    if not preview.considered:
        return "no proposals to replay"
    lines = [
        f"replayed {preview.considered} proposals "
        f"({preview.oldest:%Y-%m-%d %H:%M} – {preview.newest:%Y-%m-%d %H:%M}); "
        f"{preview.moved} would move, {preview.by_draft} of them by the draft's own changes "
        "(the pre-validator is not called)",
        "",
        f"  {'route':<22} {'now':>7} {'draft':>7}",
    ]
    lines += [
        f"  {route:<22} {preview.before[route]:>7} {preview.after[route]:>7}"
        for route in preview.routes
    ]
    for move in preview.moves:
        rejected = f", {move.rejected} of them rejected by reviewers" if move.rejected else ""
        own = f" ({move.by_draft} by the draft)" if move.by_draft != move.count else ""
        lines += ["", f"{move.before.label} → {move.after.label}: {move.count}{own}{rejected}"]
        lines += [
            f"  #{e.id} {e.agent} {e.action} risk {e.risk_score} ({e.status}): {e.summary}"
            for e in move.examples
        ]
    lines += review_route_lines(preview)
    return "\n".join(lines)


def review_route_lines(preview: simulation.Preview) -> list[str]:
    """What each review route of the draft would have taken, and which teams it requires."""
    if not preview.review_routes:
        return []
    lines = ["", "review routes (of what goes to people):"]
    for route in preview.review_routes:
        teams = ", ".join(f"{team} {n}" for team, n in route["require"].items())
        if not route["count"]:
            lines.append(f"  {route['route']} → {teams}: matches nothing")
            continue
        needed = ", ".join(
            f"{count} need {total}" for total, count in sorted(route["needed"].items())
        )
        lines.append(f"  {route['route']} → {teams}: {route['count']} ({needed} approvals)")
        lines += [f"    #{e['id']} {e['summary']}" for e in route["examples"]]
    lines.append(f"  no route (any reviewer, quorum by risk): {preview.unrouted}")
    return lines
