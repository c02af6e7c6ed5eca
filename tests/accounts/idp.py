"""A real OpenID Connect provider for the sign-in tests, run as its own process.

node's oidc-provider (pinned, installed by scripts/test into .npm-tools) with
``provider.mjs``: discovery, JWKS, signed ID tokens, PKCE required, a login
form that checks passwords, groups per person. Not a mock: Airlock talks to
it over HTTP exactly as it would to Okta or Keycloak.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests
from django.test import Client

from tests.serving import ROOT, free_port
from tests.support import require

TOOLS = ROOT / ".npm-tools"
PACKAGE = TOOLS / "node_modules" / "oidc-provider"
SCRIPT = Path(__file__).with_name("provider.mjs")
# Where the provider sends a browser back to Django's test client (``sign_in``), per provider id.
TEST_CLIENT_CALLBACK = "http://testserver/accounts/oidc/{id}/login/callback/"


@dataclass
class Person:
    sub: str
    username: str
    password: str
    groups: list[str]

    def as_json(self) -> dict:
        return {**self.__dict__, "email": f"{self.username}@example.com"}


class IdentityProvider:
    """One provider process; ``people`` is what its users file says (rewrite with ``save``);
    ``sign_in`` signs a Django test client in through it."""

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

    def sign_in(self, client: Client, provider_id: str, person: Person):
        """Sign ``client`` in through this provider as ``person``; the callback's response.

        Airlock's side runs in the test process (``client``, with ``provider_id`` configured
        and ``TEST_CLIENT_CALLBACK`` among the provider's redirect URIs); the browser's side
        is a fresh HTTP session at the provider (so it asks for the password), and Airlock
        fetches the tokens and the keys from the provider over HTTP as it does in production.
        """
        started = client.post(f"/accounts/oidc/{provider_id}/login/")
        assert started.status_code == 302, started.content[:500]
        assert started["Location"].startswith(self.issuer + "/auth?"), started["Location"]
        browser = requests.Session()
        form = browser.get(started["Location"], timeout=10)
        assert form.status_code == 200 and 'id="idp-username"' in form.text, form.text[:500]
        action = re.search(r'<form method="post" action="([^"]+)"', form.text)[1]
        credentials = {"username": person.username, "password": person.password}
        answer = browser.post(
            urljoin(form.url, action), data=credentials, allow_redirects=False, timeout=10
        )
        # The provider's own redirects (its login, then its consent) until it sends the
        # browser back to Airlock with the code.
        while answer.is_redirect:
            location = urljoin(answer.url, answer.headers["Location"])
            if not location.startswith(self.issuer + "/"):
                break
            answer = browser.get(location, allow_redirects=False, timeout=10)
        assert answer.is_redirect, (
            f"the provider answered {answer.status_code}: {answer.text[:500]}"
        )
        back = urlsplit(answer.headers["Location"])
        return client.get(f"{back.path}?{back.query}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
