from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals.core import tokens


class Command(BaseCommand):
    help = "Create an agent and print its token (shown once; stored hashed)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--capability",
            action="append",
            default=[],
            metavar="GLOB",
            help="action-name glob the agent may propose (repeat): script.execute, docker.*, *",
        )
        parser.add_argument(
            "--owner", help="username of the agent's owner (cannot approve its proposals)"
        )

    def handle(self, *args, name, capability, owner, **options):
        owner_user = None
        if owner:
            owner_user = get_user_model().objects.filter(username=owner).first()
            if owner_user is None:
                raise CommandError(f"no user named {owner!r}")
        if not capability:
            raise CommandError("give at least one --capability (e.g. --capability script.execute)")
        try:
            with transaction.atomic():
                agent, token = tokens.create_agent(name, capability, owner_user)
        except tokens.TokenError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"agent {agent.name} created with capabilities {', '.join(agent.capabilities)}"
        )
        self.stdout.write(token)
