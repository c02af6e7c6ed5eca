"""``demo``: the demo accounts and a fresh demo agent token, for a deployment ``serve`` did not start.

``docker/stack up`` runs it in a web container once the scale deployment answers.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create (or reuse) the demo accounts and print a fresh token for the demo agent."

    def add_arguments(self, parser):
        parser.add_argument(
            "--json", action="store_true", help="print {users, agent, token} as one JSON object"
        )

    def handle(self, *args, **options):
        from console.demo import ensure_demo

        demo = ensure_demo()
        if options["json"]:
            self.stdout.write(json.dumps(demo))
            return
        password = next(iter(demo["users"].values()))
        self.stdout.write(
            f"Demo accounts {', '.join(demo['users'])} (password for each: {password})\n"
            f"Demo agent {demo['agent']} token (shown once): {demo['token']}"
        )
