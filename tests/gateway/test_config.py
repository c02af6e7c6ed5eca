"""The upstreams' configuration: one validation for the console and the file, every change audited."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from approvals.gateway import config
from approvals.gateway.models import Upstream
from audit.models import AuditEvent
from tests.console.conftest import logged_in
from tests.gateway.conftest import stdio_upstream

FILE = """
upstreams:
  github:
    command: [npx, -y, "@modelcontextprotocol/server-github"]
    env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}", LITERAL: "s3cr3t-value"}
    network: [API.github.com:443, "*.githubusercontent.com:443", "[::1]:8080"]
  crm:
    url: https://crm.example.com/mcp
    headers: {Authorization: "Bearer hidden-token"}
    timeout_seconds: 30
"""


def trail(verb_prefix: str = "gateway.") -> list[tuple[str, str, dict]]:
    return [
        (event.actor, event.verb, event.data)
        for event in AuditEvent.objects.filter(verb__startswith=verb_prefix).order_by("seq")
    ]


@pytest.mark.django_db
def test_a_file_sets_the_upstreams_whole_audited_without_secret_values(tmp_path, capsys):
    path = tmp_path / "upstreams.yaml"
    path.write_text(FILE)
    call_command("upstreams", "apply", str(path))
    assert "added github\nadded crm\n2 change(s); 2 upstream(s)" in capsys.readouterr().out
    github = Upstream.objects.get(name="github")
    assert (github.transport, github.command[0], github.timeout_seconds) == ("stdio", "npx", 60)
    assert github.network == ["api.github.com:443", "*.githubusercontent.com:443", "[::1]:8080"]
    events = trail()
    assert [verb for _, verb, _ in events] == ["gateway.upstream_added"] * 2
    assert events[0][2]["env_names"] == ["GITHUB_PERSONAL_ACCESS_TOKEN", "LITERAL"]
    assert events[1][2]["header_names"] == ["Authorization"]
    assert events[0][2]["network"] == github.network and events[1][2]["network"] == []
    everything = str(events)
    assert "s3cr3t-value" not in everything and "hidden-token" not in everything

    call_command("upstreams", "apply", str(path))  # the same file again: nothing to do
    assert "0 change(s)" in capsys.readouterr().out
    path.write_text(FILE.replace("hidden-token", "new-token").replace("  github:", "  gh:"))
    call_command("upstreams", "apply", str(path))
    assert capsys.readouterr().out.splitlines()[:3] == ["removed github", "added gh", "changed crm"]
    changed = trail()[-1]
    assert changed[1] == "gateway.upstream_changed" and "new-token" not in str(changed)
    assert changed[2]["fingerprint"] != events[1][2]["fingerprint"]  # a changed secret shows

    call_command("upstreams", "export")
    exported = capsys.readouterr().out
    (tmp_path / "again.yaml").write_text(exported)
    call_command("upstreams", "apply", str(tmp_path / "again.yaml"))
    assert "0 change(s)" in capsys.readouterr().out  # export → apply changes nothing


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("upstreams:\n  Bad_Name: {command: [ls]}", "name 'Bad_Name': lowercase letters"),
        ("upstreams:\n  a__b: {command: [ls]}", "name 'a__b'"),
        ("upstreams:\n  x: {command: [ls], url: 'http://h/mcp'}", "x: give either command"),
        ("upstreams:\n  x: {}", "x: give either command"),
        ("upstreams:\n  x: {command: ls}", "x: command: a list of non-empty strings"),
        ("upstreams:\n  x: {url: 'ftp://h/mcp'}", "x: url: an http:// or https:// URL"),
        ("upstreams:\n  x: {command: [ls], timeout_seconds: 0}", "x: timeout_seconds: a whole"),
        ("upstreams:\n  x: {command: [ls], env: {A: 1}}", "x: env: a mapping of names to text"),
        ("upstreams:\n  x: {command: [ls], env: {'1A': b}}", "x: env: invalid name(s) 1A"),
        ("upstreams:\n  x: {url: 'http://h/mcp', headers: {'a b': c}}", "invalid name(s) a b"),
        ("upstreams:\n  x: {command: [ls], headers: {A: b}}", "x: headers: only for an upstream"),
        ("upstreams:\n  x: {command: [ls], colour: red}", "x: unknown field(s) colour"),
        (
            "upstreams:\n  x: {command: [ls], read: [opt/mcp]}",
            "x: read: 'opt/mcp' is not an absolute",
        ),
        ("upstreams:\n  x: {command: [ls], read: /opt}", "x: read: a list of absolute paths"),
        ("upstreams:\n  x: {command: [ls], read: ['{data}/..']}", "x: read: {data}/.. would show"),
        (
            "upstreams:\n  x: {command: [ls], write: ['{data}']}",
            "would show the upstream Airlock's data",
        ),
        ("upstreams:\n  x: {command: [ls], write: ['{data}/x']}", "x: write: {data}/x would show"),
        ("upstreams:\n  x: {url: 'http://h/mcp', read: [/opt]}", "x: read: only for an upstream"),
        ("upstreams:\n  x: {url: 'http://h/mcp', network: [h:1]}", "x: network: only for an"),
        ("upstreams:\n  x: {command: [ls], network: h:443}", "x: network: a list of host:port"),
        ("upstreams:\n  x: {command: [ls], network: [h]}", "x: network: 'h' is not host:port"),
        ("upstreams:\n  x: {command: [ls], network: ['h:99999']}", "x: network: 'h:99999': the"),
        ("upstreams:\n  x: {command: [ls], network: ['a b:1']}", "neither a host name nor an"),
        ("upstreams:\n  x: {command: [ls], network: [[h, 1]]}", "is not host:port text"),
        ("upstreams:\n  x: {image: 'Bad Image'}", "x: image: 'Bad Image' is not an image"),
        ("upstreams:\n  x: {image: [a]}", "x: image: ['a'] is not an image reference"),
        ("upstreams:\n  x: {image: 'a:1', read: [/opt]}", "x: read: an upstream run from an"),
        ("upstreams:\n  x: {image: 'a:1', network: [h]}", "x: network: 'h' is not host:port"),
        ("upstreams:\n  x: {image: 'a:1', url: 'http://h/mcp'}", "x: give either command or"),
        ("servers: {}", "the file is a mapping with one key, upstreams"),
        ("upstreams: [a]", "upstreams: a mapping of names"),
        ("upstreams: {x: [", "not YAML"),
    ],
)
def test_a_bad_file_is_refused_whole_naming_each_problem(tmp_path, text, said, settings):
    text, said = (x.replace("{data}", str(settings.DATA_DIR)) for x in (text, said))
    Upstream.objects.create(name="kept", transport="stdio", command=["true"])
    path = tmp_path / "bad.yaml"
    path.write_text(
        text + "\n" + "  fine: {command: [ls]}\n" if text.startswith("upstreams:\n") else text
    )
    with pytest.raises(CommandError) as raised:
        call_command("upstreams", "apply", str(path))
    assert said in str(raised.value)
    assert list(Upstream.objects.values_list("name", flat=True)) == ["kept"]  # nothing written
    assert trail() == []


@pytest.mark.django_db
def test_an_image_is_a_stdio_upstream_whose_command_is_optional(tmp_path, capsys):
    path = tmp_path / "upstreams.yaml"
    path.write_text(
        "upstreams:\n"
        "  fetch: {image: 'registry.local:5000/mcp/fetch:1.2', env: {TOKEN: '${T}'}}\n"
        "  pinned: {image: 'mcp/git@sha256:" + "a" * 64 + "', command: [mcp-git, --ro]}\n"
    )
    call_command("upstreams", "apply", str(path))
    fetch, pinned = Upstream.objects.order_by("name")
    assert (fetch.transport, fetch.image, fetch.command) == (
        "stdio",
        "registry.local:5000/mcp/fetch:1.2",
        [],
    )
    assert pinned.command == ["mcp-git", "--ro"]
    assert trail()[0][2]["image"] == "registry.local:5000/mcp/fetch:1.2"
    exported = tmp_path / "again.yaml"
    capsys.readouterr()
    call_command("upstreams", "export")
    exported.write_text(capsys.readouterr().out)
    call_command("upstreams", "apply", str(exported))  # read back: nothing changes
    assert "0 change(s)" in capsys.readouterr().out


@pytest.mark.django_db
def test_the_console_adds_changes_and_removes_upstreams_and_never_shows_a_secret(admin_user):
    client = logged_in(admin_user)
    page = reverse("console:upstreams")
    added = client.post(
        page,
        {
            "name": "crm",
            "url": "https://crm.example.com/mcp",
            "headers": "Authorization: Bearer top-secret\nX-Tenant: ${TENANT}",
            "timeout_seconds": 30,
            "enabled": "on",
        },
    )
    assert added.status_code == 302, added.content
    crm = Upstream.objects.get(name="crm")
    assert crm.headers == {"Authorization": "Bearer top-secret", "X-Tenant": "${TENANT}"}
    listed = client.get(page).content.decode()
    assert "crm.example.com" in listed and "top-secret" not in listed
    form = client.get(reverse("console:upstream", args=["crm"])).content.decode()
    assert "Authorization: ********" in form and "X-Tenant: ${TENANT}" in form
    assert "top-secret" not in form
    kept = client.post(
        reverse("console:upstream", args=["crm"]),
        {
            "url": "https://crm.example.com/mcp",
            "headers": "Authorization: ********\nX-Tenant: ${TENANT}",
            "timeout_seconds": 45,
        },
    )
    assert kept.status_code == 302, kept.content
    crm.refresh_from_db()
    assert crm.headers["Authorization"] == "Bearer top-secret"  # left hidden, kept
    assert (crm.timeout_seconds, crm.enabled) == (45, False)

    bad = client.post(
        page, {"name": "two", "command": "ls", "url": "http://h/mcp", "timeout_seconds": 5}
    )
    assert bad.status_code == 400
    assert "give either command" in bad.content.decode()
    unclosed = client.post(page, {"name": "q", "command": "ls 'open", "timeout_seconds": 5})
    assert unclosed.status_code == 400 and "No closing quotation" in unclosed.content.decode()
    hostless = client.post(
        page, {"name": "n", "command": "ls", "network": "github.com", "timeout_seconds": 5}
    )
    assert hostless.status_code == 400
    assert "network: &#x27;github.com&#x27; is not host:port" in hostless.content.decode()
    assert not Upstream.objects.filter(name__in=["two", "q", "n"]).exists()
    reaching = client.post(
        page,
        {"name": "gh", "command": "ls", "network": "api.github.com:443\n", "timeout_seconds": 5},
    )
    assert reaching.status_code == 302
    assert Upstream.objects.get(name="gh").network == ["api.github.com:443"]
    assert "connects to <code>api.github.com:443</code>" in client.get(page).content.decode()
    client.post(reverse("console:upstream-action", args=["gh", "remove"]))
    boxed = client.post(page, {"name": "box", "image": "mcp/fetch:1", "timeout_seconds": 5})
    assert boxed.status_code == 302
    assert Upstream.objects.get(name="box").image == "mcp/fetch:1"
    listed = client.get(page).content.decode()
    assert "image <code>mcp/fetch:1</code>" in listed and "a container, no network" in listed
    client.post(reverse("console:upstream-action", args=["box", "remove"]))

    removed = client.post(reverse("console:upstream-action", args=["crm", "remove"]))
    assert removed.status_code == 302 and not Upstream.objects.exists()
    assert [(actor, verb) for actor, verb, _ in trail()] == [
        (f"user:{admin_user.username}", "gateway.upstream_added"),
        (f"user:{admin_user.username}", "gateway.upstream_changed"),
        (f"user:{admin_user.username}", "gateway.upstream_added"),
        (f"user:{admin_user.username}", "gateway.upstream_removed"),
        (f"user:{admin_user.username}", "gateway.upstream_added"),
        (f"user:{admin_user.username}", "gateway.upstream_removed"),
        (f"user:{admin_user.username}", "gateway.upstream_removed"),
    ]
    assert "top-secret" not in str(trail())


@pytest.mark.django_db
def test_changing_upstreams_needs_a_fresh_factor_and_the_admin_role(admin_user, reviewer):
    stale = logged_in(admin_user, stepped_up=False)
    asked = stale.post(
        reverse("console:upstreams"), {"name": "x", "command": "ls", "timeout_seconds": 5}
    )
    assert asked.status_code == 302 and "step" in asked["Location"]
    refused = logged_in(reviewer).post(
        reverse("console:upstreams"), {"name": "x", "command": "ls", "timeout_seconds": 5}
    )
    assert refused.status_code == 403
    assert not Upstream.objects.exists()


def test_a_name_splits_back_into_server_and_tool():
    from approvals.gateway.connections import split

    assert split("github__merge_pull_request") == ("github", "merge_pull_request")
    assert split("my-crm__find__deep") == ("my-crm", "find__deep")
    assert split("script_execute") is None and split("__x") is None
    with pytest.raises(config.ConfigError):
        config.clean("a__b", {"command": ["ls"]})


@pytest.mark.django_db
def test_the_reviewers_page_says_who_makes_the_call_once_approved(reviewer, agent):
    from tests.console.conftest import pending_proposal

    Upstream.objects.create(name="crm", transport="http", url="https://crm.example.com/mcp")
    client = logged_in(reviewer)
    pages = {}
    for tool in ("crm.find_customer", "github.merge"):
        proposal = pending_proposal(
            agent,
            action="tool.call",
            parameters={"tool": tool, "arguments": {"email": "a@example.com"}},
            summary=f"{tool}(...)",
        )
        pages[tool] = client.get(reverse("console:proposal", args=[proposal.pk])).content.decode()
    assert "MCP gateway calls upstream server <code>crm</code>" in pages["crm.find_customer"]
    assert "the agent makes this call itself" in pages["github.merge"]
    assert "a@example.com" in pages["crm.find_customer"]


@pytest.mark.django_db
def test_the_console_checks_an_upstream_by_listing_its_tools(admin_user):
    Upstream.objects.create(name="up", transport="stdio", **stdio_upstream())
    Upstream.objects.create(name="gone", transport="stdio", command=["/nonexistent/server"])
    client = logged_in(admin_user)
    checked = client.post(reverse("console:upstream-action", args=["up", "check"]), follow=True)
    assert "Upstream up answered with 12 tool(s): up__echo, up__add" in checked.content.decode()
    failed = client.post(reverse("console:upstream-action", args=["gone", "check"]), follow=True)
    assert "upstream gone is unreachable: its command was not found" in failed.content.decode()
    unknown = client.post(reverse("console:upstream-action", args=["up", "explode"]))
    assert unknown.status_code == 404
