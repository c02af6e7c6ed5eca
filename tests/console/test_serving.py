"""The console as served: hosts, origins, TLS and the Content-Security-Policy follow from SITE_URL."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator
from pygments.formatters import HtmlFormatter

from console.asgi import application
from tests.console.test_settings import python_with
from tests.serving import ROOT

SHOW = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({k: getattr(s, k) for k in ('ALLOWED_HOSTS', 'WEBSOCKET_ALLOWED_ORIGINS', "
    "'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', "
    "'SECURE_PROXY_SSL_HEADER') if hasattr(s, k)}))"
)
STRONG_KEY = "k3y-" + "x7Qp9v" * 10


def shown(tmp_path, **env) -> dict:
    done = python_with(tmp_path, SHOW, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.any_database
def test_hosts_and_origins_follow_the_site_url(tmp_path):
    local = shown(tmp_path)
    assert local["ALLOWED_HOSTS"] == ["localhost", "127.0.0.1", "[::1]"]
    assert local["WEBSOCKET_ALLOWED_ORIGINS"] == ["http://localhost:8000"]
    assert not local["SESSION_COOKIE_SECURE"] and local["SECURE_HSTS_SECONDS"] == 0
    public = shown(tmp_path, SITE_URL="https://airlock.example.com/")
    assert public["ALLOWED_HOSTS"] == ["airlock.example.com"]
    assert public["WEBSOCKET_ALLOWED_ORIGINS"] == ["https://airlock.example.com"]
    assert public["SESSION_COOKIE_SECURE"] and public["CSRF_COOKIE_SECURE"]
    assert public["SECURE_SSL_REDIRECT"] and public["SECURE_HSTS_SECONDS"] == 31_536_000
    given = shown(tmp_path, SITE_URL="https://airlock.example.com", ALLOWED_HOSTS="a.example, b")
    assert given["ALLOWED_HOSTS"] == ["a.example", "b"]


@pytest.mark.any_database
def test_a_proxy_that_terminates_tls_is_named_by_its_header(tmp_path):
    proxied = shown(tmp_path, SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto: https")
    assert proxied["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    refused = python_with(tmp_path, SHOW, SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert refused.returncode != 0 and "'Header-Name: value'" in refused.stderr


@pytest.mark.any_database
@pytest.mark.parametrize("url", ["airlock.example.com", "ftp://airlock.example.com", "https://"])
def test_a_site_url_that_is_not_an_address_is_refused_at_start(tmp_path, url):
    refused = python_with(tmp_path, SHOW, SITE_URL=url)
    assert refused.returncode != 0
    assert "must be the console's address" in refused.stderr


@pytest.mark.any_database
def test_an_install_served_over_https_passes_the_deployment_checks(tmp_path):
    done = python_with(
        tmp_path,
        "import django, sys; django.setup(); from django.core.management import call_command; "
        "call_command('check', deploy=True, fail_level='WARNING')",
        SITE_URL="https://airlock.example.com",
        SECRET_KEY=STRONG_KEY,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    plain = python_with(
        tmp_path,
        "import django; django.setup(); from django.core.management import call_command; "
        "call_command('check', deploy=True, fail_level='WARNING')",
        SECRET_KEY=STRONG_KEY,
    )
    assert plain.returncode != 0  # over plain HTTP the same checks say what is missing
    assert "SECURE_HSTS_SECONDS" in plain.stderr and "SESSION_COOKIE_SECURE" in plain.stderr


async def open_queue(user, origin: bytes | None) -> tuple[bool, WebsocketCommunicator]:
    headers = [(b"origin", origin)] if origin is not None else []
    communicator = WebsocketCommunicator(application, "/ws/queue/", headers=headers)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    return connected, communicator


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (b"http://evil.example", False),
        (b"http://localhost.evil.example", False),
        (b"null", False),
        (b"http://localhost:8000", True),
        (b"http://127.0.0.1:43210", True),  # a console on this machine, another port
    ],
)
async def test_a_browser_websocket_from_another_origin_is_refused(reviewer, origin, allowed):
    connected, communicator = await open_queue(reviewer, origin)
    assert connected is allowed
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_only_the_site_origin_when_the_site_is_not_this_machine(reviewer, settings):
    settings.WEBSOCKET_ALLOWED_ORIGINS = ["https://airlock.example.com"]
    settings.WEBSOCKET_LOOPBACK_ORIGINS = False
    for origin, allowed in [
        (b"https://airlock.example.com", True),
        (b"https://airlock.example.com:443", True),
        (b"http://airlock.example.com", False),
        (b"http://localhost:8000", False),
    ]:
        connected, communicator = await open_queue(reviewer, origin)
        assert connected is allowed, origin
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_client_that_sends_no_origin_is_not_a_browser_and_passes(reviewer):
    connected, communicator = await open_queue(reviewer, None)
    assert connected
    await communicator.disconnect()


@pytest.mark.django_db
def test_console_pages_carry_a_policy_without_inline_scripts(client, reviewer):
    client.force_login(reviewer)
    policy = client.get("/queue/").headers["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert "unsafe" not in policy and directives["frame-ancestors"] == "'none'"
    login = client.get("/login/")
    assert "Content-Security-Policy" in login.headers


def test_the_highlighting_styles_are_pygments_own():
    served = (ROOT / "static" / "console" / "pygments.css").read_text()
    assert HtmlFormatter(cssclass="code").get_style_defs(".code") in served


def test_no_template_runs_inline_script_or_style():
    found = []
    for template in (ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        for needle in ("<style", " onclick=", " onsubmit=", " onchange=", " style=", "javascript:"):
            if needle in text:
                found.append(f"{template.relative_to(ROOT)}: {needle.strip()}")
        for script in text.split("<script")[1:]:
            if "src=" not in script.split(">", 1)[0] and 'type="application/json"' not in script:
                found.append(f"{template.relative_to(ROOT)}: inline <script>")
    assert found == []
