from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from approvals.core import tokens


class Command(BaseCommand):
    help = (
        "Create a personal API token for a user (reviewers approve/reject with it); printed once."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        token = tokens.create_user_token(user)
        self.stderr.write(f"token created for {username}")
        self.stdout.write(token)
