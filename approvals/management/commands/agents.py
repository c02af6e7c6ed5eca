"""``manage.py agents``: list agents; pause and resume one, several, or all at once."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from approvals.core import pausing
from approvals.management.commands.policy import cli_actor
from approvals.models import Agent


class Command(BaseCommand):
    help = (
        "List agents, or pause and resume them: a paused agent's proposals are refused "
        "until it is resumed. `agents pause --all` is the kill switch."
    )

    def add_arguments(self, parser):
        parser.add_argument("operation", choices=["list", "pause", "resume"])
        parser.add_argument("names", nargs="*", metavar="NAME", help="the agents")
        parser.add_argument("--all", action="store_true", help="every agent (not with NAME)")
        parser.add_argument("--reason", default="", help="why, for the audit trail")

    def handle(self, *args, operation, names, all, reason, **options):
        if operation == "list":
            for agent in Agent.objects.order_by("name"):
                state = "paused" if agent.paused_at else "active" if agent.is_active else "revoked"
                why = f"  {agent.pause_reason}" if agent.paused_at and agent.pause_reason else ""
                self.stdout.write(f"{agent.name:<24} {state}{why}")
            return
        if bool(names) == bool(all):
            raise CommandError(f"agents {operation}: name the agents, or give --all (not both)")
        actor = cli_actor()
        change = pausing.pause if operation == "pause" else pausing.resume
        try:
            changed = change(None if all else names, actor, reason, via="manage.py")
        except pausing.PauseError as exc:
            raise CommandError(exc.message) from None
        verb = "paused" if operation == "pause" else "resumed"
        if changed:
            self.stdout.write(f"{verb}: {', '.join(changed)}")
        else:
            self.stdout.write(f"nothing to do: every agent named was already {verb}")
