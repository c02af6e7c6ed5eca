"""A real OpenID Connect provider for the sign-in tests, run as its own process.

node's oidc-provider (pinned, installed by scripts/test into .npm-tools) with
``provider.mjs``: discovery, JWKS, signed ID tokens, PKCE required, a login
form that checks passwords, groups per person. Not a mock: Airlock talks to
it over HTTP exactly as it would to Okta or Keycloak.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.serving import ROOT, free_port
from tests.support import require

TOOLS = ROOT / ".npm-tools"
PACKAGE = TOOLS / "node_modules" / "oidc-provider"
SCRIPT = Path(__file__).with_name("provider.mjs")


@dataclass
class Person:
    sub: str
    username: str
    password: str
    groups: list[str]

    def as_json(self) -> dict:
        return {**self.__dict__, "email": f"{self.username}@example.com"}


class IdentityProvider:
    """One provider process; ``people`` is what its users file says (rewrite with ``save``)."""

    def __init__(self, directory: Path, redirect_uris: list[str], *, rogue: bool = False):
        require(shutil.which("node") is not None, "the sign-in tests need Node.js")
        require(
            PACKAGE.exists(), f"oidc-provider is not installed in {TOOLS} (scripts/test does it)"
        )
        self.directory = directory
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.client_id, self.client_secret = "airlock", "airlock-test-secret"
        self.people: list[Person] = []
        self.users_file = directory / f"users-{self.port}.json"
        self.log = directory / f"provider-{self.port}.log"
        self.save()
        script = TOOLS / "airlock-test-provider.mjs"  # beside node_modules, where imports resolve
        shutil.copyfile(SCRIPT, script)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "PORT": str(self.port),
            "CLIENT_ID": self.client_id,
            "CLIENT_SECRET": self.client_secret,
            "REDIRECT_URIS": ",".join(redirect_uris),
            "USERS_FILE": str(self.users_file),
            "ROGUE": "1" if rogue else "",
        }
        self.process = subprocess.Popen(
            ["node", str(script)],
            cwd=TOOLS,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the provider exited:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(self.issuer + "/.well-known/openid-configuration"):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the provider did not answer:\n{self.log.read_text()}")

    def add(self, username: str, groups: list[str]) -> Person:
        person = Person(f"sub-{username}", username, f"pw-{username}", groups)
        self.people.append(person)
        self.save()
        return person

    def save(self) -> None:
        self.users_file.write_text(json.dumps([p.as_json() for p in self.people]))

    def authorizations(self) -> list[dict]:
        """The parameters of every authorization request the provider received."""
        lines = self.log.read_text().splitlines()
        return [
            json.loads(line[len("AUTHORIZE ") :]) for line in lines if line.startswith("AUTHORIZE ")
        ]

    def environment(self, provider_id: str, name: str) -> dict[str, str]:
        """What Airlock's environment says to sign in through this provider."""
        prefix = f"OIDC_{provider_id.upper()}_"
        return {
            f"{prefix}ISSUER": self.issuer,
            f"{prefix}CLIENT_ID": self.client_id,
            f"{prefix}CLIENT_SECRET": self.client_secret,
            f"{prefix}NAME": name,
            f"{prefix}SCOPES": "openid profile email groups",
            f"{prefix}ADMIN_GROUPS": "airlock-admins",
            f"{prefix}REVIEWER_GROUPS": "airlock-reviewers",
        }

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
