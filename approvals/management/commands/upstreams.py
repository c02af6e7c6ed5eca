"""The MCP gateway's upstream servers from the shell.

    manage.py upstreams list              the upstreams, one per line
    manage.py upstreams export            the upstreams as YAML on stdout
    manage.py upstreams apply FILE        make the upstreams those of FILE (each change audited)
    manage.py upstreams check [NAME]      connect to each upstream and list its tools

FILE may be ``-`` for stdin; a file with a fault writes nothing and every
fault is named. See ``approvals.gateway.config`` for the file's shape.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.gateway import config, connections
from approvals.gateway.models import Upstream
from approvals.management.commands.policy import cli_actor, read_file


class Command(BaseCommand):
    help = "List, export, apply or check the MCP gateway's upstream servers."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="subcommand", required=True)
        commands.add_parser("list", help="the upstreams, one per line")
        commands.add_parser("export", help="the upstreams as YAML")
        apply = commands.add_parser("apply", help="make the upstreams those of a YAML file")
        apply.add_argument("file", help="a YAML file, or - for stdin")
        check = commands.add_parser("check", help="connect and list each upstream's tools")
        check.add_argument("name", nargs="?", help="one upstream (default: every enabled one)")

    def handle(self, *args, subcommand: str, **options) -> None:
        getattr(self, f"_{subcommand}")(**options)

    def _list(self, **_) -> None:
        for upstream in Upstream.objects.all():
            where = " ".join(upstream.command) if upstream.command else upstream.url
            state = "" if upstream.enabled else "  (disabled)"
            self.stdout.write(f"{upstream.name}  {upstream.transport}  {where}{state}")

    def _export(self, **_) -> None:
        self.stdout.write(config.export(), ending="")

    def _apply(self, file: str, **_) -> None:
        text = read_file(file)
        try:
            changes = config.apply(text, cli_actor())
        except config.ConfigError as exc:
            problems = "\n".join(f"  {problem}" for problem in exc.problems)
            raise CommandError(f"{file} was not applied:\n{problems}") from None
        for change in changes:
            self.stdout.write(f"{change.verb} {change.name}")
        self.stdout.write(f"{len(changes)} change(s); {Upstream.objects.count()} upstream(s)")

    def _check(self, name: str | None = None, **_) -> None:
        found = [t for t in connections.targets() if name in (None, t.name)]
        if name is not None and not found:
            raise CommandError(f"no enabled upstream named {name!r}")
        failed = 0
        for target in found:
            try:
                tools = connections.check(target)
            except connections.UpstreamDown as exc:
                failed += 1
                self.stdout.write(f"{target.name}: {exc.message}")
            else:
                self.stdout.write(f"{target.name}: {len(tools)} tool(s): {', '.join(tools)}")
        if failed:
            raise CommandError(f"{failed} upstream(s) could not list their tools")
