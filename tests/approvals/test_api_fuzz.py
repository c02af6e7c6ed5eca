"""Property: nothing a client sends makes the API answer 5xx; every 4xx has the error shape.

Ids in URLs too: every route that names a row takes ``<id:…>`` (``infrastructure.converters``),
so a number past a 64-bit key is a 404 on the API, the console's pages and the websockets
alike; the database never sees it. And the plugin that fails a test on a server error
(``tests/server_errors.py``) is shown to see one.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.converters import IntConverter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.core.tokens import create_user_token
from console.asgi import application
from console.routing import websocket_urlpatterns
from infrastructure.converters import ID_MAX, IdConverter
from tests import server_errors, serving
from tests.conftest import client_for

ACTIONS = st.sampled_from(
    [
        "script.execute",
        "host.exec",
        "docker.restart_container",
        "host.kill_process",
        "host.restart_service",
        "docker.prune_networks",
        "nope",
        "",
        "*",
    ]
)
SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
PARAMETERS = (
    st.fixed_dictionaries(
        {},
        optional={
            "language": st.sampled_from(["python", "bash", "javascript", "cobol"]) | SCALARS,
            "code": st.text(max_size=200) | SCALARS,
            "timeout_seconds": st.integers(-5, 400) | SCALARS,
            "command": st.text(max_size=80) | SCALARS,
            "container": st.text(max_size=40) | SCALARS,
            "service_name": st.text(max_size=40) | SCALARS,
            "target": st.text(max_size=20) | st.integers() | SCALARS,
            "signal": st.sampled_from(["SIGTERM", "SIGKILL", "SIGSTOP"]) | SCALARS,
            "network": SCALARS,
        },
    )
    | JSON
)
BODIES = (
    st.fixed_dictionaries(
        {"action": ACTIONS | SCALARS},
        optional={
            "parameters": PARAMETERS,
            "reason": SCALARS,
            "urgency": st.sampled_from(["low", "normal", "high", "critical", "x"]) | SCALARS,
            "idempotency_key": SCALARS,
            "extra": JSON,
        },
    )
    | JSON
)
QUERY = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20)

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_clean(response) -> None:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["type"], str) and error["type"]
        assert isinstance(error["message"], str) and error["message"]


@pytest.fixture
def api(agent_and_token):
    return client_for(agent_and_token[1])


@FUZZ
@given(body=BODIES)
def test_proposals_never_500(api, body):
    assert_clean(api.post("/api/v1/proposals", json.dumps(body), content_type="application/json"))


@FUZZ
@given(
    raw=st.binary(max_size=200),
    content_type=st.sampled_from(
        [
            "application/json",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ]
    ),
)
def test_raw_bytes_never_500(api, raw, content_type):
    assert_clean(api.post("/api/v1/proposals", raw, content_type=content_type))


@FUZZ
@given(body=JSON, kind=st.sampled_from(["approve", "reject"]), pk=st.integers(-3, 10**12))
def test_decisions_never_500(reviewer_api, body, kind, pk):
    path = f"/api/v1/proposals/{abs(pk)}/{kind}"
    assert_clean(reviewer_api.post(path, json.dumps(body), content_type="application/json"))


@FUZZ
@given(wait=QUERY, after=QUERY, limit=QUERY, pk=st.integers(0, 10**12))
def test_reads_never_500(api, wait, after, limit, pk):
    assert_clean(api.get(f"/api/v1/proposals/{pk}", {"wait": wait[:3] if wait.isdigit() else wait}))
    assert_clean(api.get(f"/api/v1/executions/{pk}/output", {"after": after, "limit": limit}))
    assert_clean(api.post(f"/api/v1/executions/{pk}/cancel"))
    assert_clean(api.get(f"/api/v1/executions/{pk}"))


@FUZZ
@given(header=st.text(max_size=60))
def test_any_authorization_header_never_500(db, header):
    from rest_framework.test import APIClient

    client = APIClient()
    try:
        client.credentials(HTTP_AUTHORIZATION=header)
    except Exception:
        return
    assert_clean(client.get("/api/v1/capabilities"))


ROUTES = [
    "/api/v1/proposals",
    "/api/v1/proposals/{proposal}",
    "/api/v1/proposals/{proposal}/approve",
    "/api/v1/proposals/{proposal}/reject",
    "/api/v1/capabilities",
    "/api/v1/sandboxes",
    "/api/v1/sandboxes/{proposal}",
    "/api/v1/sandboxes/{proposal}/execute",
    "/api/v1/executions/{proposal}",
    "/api/v1/executions/{proposal}/output",
    "/api/v1/executions/{proposal}/cancel",
]
METHODS = ["get", "post", "put", "patch", "delete", "options", "head"]
SHORT_WAITS = st.sampled_from(["", "0", "0.01", "-1", "nan", "inf", "1e999", "abc", " 0", "０"])


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("method", METHODS)
@settings(FUZZ, max_examples=6)
@given(as_reviewer=st.booleans(), wait=SHORT_WAITS, body=JSON)
def test_every_route_and_method_never_500(
    api, reviewer_api, route, method, as_reviewer, wait, body
):
    """Every route, every method, with an existing pending proposal and odd ``wait`` values."""
    from approvals.models import Proposal

    if not as_reviewer and method == "post" and route == "/api/v1/sandboxes":
        return  # starting a session waits for a worker: the sessions suite covers it
    proposal = Proposal.objects.order_by("pk").last()
    if proposal is None:
        api.post(
            "/api/v1/proposals",
            {"action": "script.execute", "parameters": {"language": "python", "code": "import os"}},
            format="json",
        )
        proposal = Proposal.objects.order_by("pk").last()
    client = reviewer_api if as_reviewer else api
    path = route.format(proposal=proposal.pk) + f"?wait={wait}&after={wait}"
    data = json.dumps(body) if method in ("post", "put", "patch") else None
    response = getattr(client, method)(path, data, content_type="application/json")
    assert response.status_code < 500, (method, path, response.content[:500])
    if method != "head":  # a HEAD answer has no body to check
        assert_clean(response)


# --- ids past any key, on every route --------------------------------------------------

PAST = [ID_MAX + 1, 9999999999999999999, 160580086852608884736, 10**40]
AIRLOCK = {"console", "approvals", "executions", "accounts", "audit", "infrastructure"}
PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def routes(patterns=None, prefix: str = ""):
    """(route, converters, whose: "airlock" or the view's package) of every URL pattern."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(entry.pattern)
        converters = getattr(entry.pattern, "converters", {})
        if isinstance(entry, URLResolver):
            for inner, more, whose in routes(entry.url_patterns, route):
                yield inner, {**converters, **more}, whose
        elif isinstance(entry, URLPattern):
            package = entry.callback.__module__.split(".")[0]
            yield route, converters, "airlock" if package in AIRLOCK else package


def with_values(route: str, converters: dict, number: int) -> str:
    """``route`` with ``number`` for each number in it, ``x`` for any other parameter."""

    def value(match: re.Match) -> str:
        numbered = isinstance(converters.get(match[1]), IdConverter | IntConverter)
        return str(number) if numbered else "x"

    return "/" + PARAMETER.sub(value, route)


NUMBERED = {
    route: (converters, whose)
    for route, converters, whose in routes()
    if any(isinstance(c, IdConverter | IntConverter) for c in converters.values())
}


def test_every_route_of_airlock_that_names_a_row_takes_an_id_not_any_int():
    def any_int(converters: dict) -> bool:
        return any(isinstance(converter, IntConverter) for converter in converters.values())

    ours = [(r, c) for r, c, whose in routes() if whose == "airlock"]
    ours += [(r, c) for r, c, _ in routes(websocket_urlpatterns)]
    assert [route for route, converters in ours if any_int(converters)] == []
    assert sum(whose == "airlock" for _, whose in NUMBERED.values()) >= 15  # API and console


@pytest.fixture
def admin_clients(admin_user):
    session = Client()
    session.force_login(admin_user)
    return {"session": session, "token": client_for(create_user_token(admin_user))}


@pytest.mark.parametrize("route", sorted(NUMBERED))
def test_an_id_past_any_key_is_not_found_on_every_route(admin_clients, route):
    """A 404 before any view on Airlock's routes; another package's (allauth's ``<int:pk>``)
    reach its view, which looks up through the ORM (no rows for such a number): no 5xx."""
    converters, whose = NUMBERED[route]
    for number in PAST:
        url = with_values(route, converters, number)
        for client in admin_clients.values():
            for method in ("get", "post"):
                response = getattr(client, method)(url)
                if whose != "airlock":
                    assert response.status_code < 500, (method, url)
                    continue
                assert response.status_code == 404, (method, url, response.status_code)
                if url.startswith("/api/"):
                    assert response.json()["error"]["type"] == "not_found"


@pytest.mark.parametrize("route", sorted(NUMBERED))
def test_the_largest_id_reaches_the_view(admin_clients, route):
    converters, _ = NUMBERED[route]
    url = with_values(route, converters, ID_MAX)
    for client in admin_clients.values():
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            assert response.status_code < 500, (method, url)
            if url.startswith("/api/") and response.status_code == 404:
                assert "no such endpoint" not in response.json()["error"]["message"]


def test_the_converter_names_only_ids_a_key_holds():
    converter = IdConverter()
    assert [converter.to_python(text) for text in ("0", "007", str(ID_MAX))] == [0, 7, ID_MAX]
    for text in (str(ID_MAX + 1), "9" * 5000):
        with pytest.raises(ValueError):
            converter.to_python(text)
    with pytest.raises(ValueError):
        converter.to_url(ID_MAX + 1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("consumer_connections_closed")
@pytest.mark.parametrize(
    "path", [f"/ws/executions/{ID_MAX + 1}/", "/ws/executions/x/", "/ws/nope/"]
)
async def test_a_websocket_to_no_route_is_refused_not_an_error(agent_and_token, path):
    headers = [(b"authorization", f"Bearer {agent_and_token[1]}".encode())]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect()
    assert not connected


@pytest.mark.parametrize(
    "query",
    [
        f"/api/v1/proposals?since_id={ID_MAX + 1}",
        f"/api/v1/executions?since_id={ID_MAX + 1}",
        f"/api/v1/proposals?limit={ID_MAX + 1}",
        f"/api/v1/audit?after={ID_MAX + 1}",
        f"/api/v1/policy/export?version={ID_MAX + 1}",
        f"/api/v1/proposals?since_id={ID_MAX}",
    ],
)
def test_a_query_number_past_any_key_is_refused_or_finds_nothing(admin_clients, query):
    response = admin_clients["token"].get(query)
    assert response.status_code in (200, 400, 404), response.content[:300]
    if response.status_code != 200:
        assert response.json()["error"]["message"]


# --- the plugin that fails a test on a server error -------------------------------------


@pytest.fixture
def failing_capabilities(monkeypatch):
    from approvals.agents import api as agents_api

    def fail(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(agents_api.Capabilities, "get", fail)


def test_the_plugin_fails_a_test_that_caused_a_500_it_did_not_look_at(
    request, failing_capabilities, agent_api
):
    agent_api.raise_request_exception = False
    assert agent_api.get("/api/v1/capabilities").status_code == 500
    with pytest.raises(pytest.fail.Exception, match="RuntimeError: a bug"):
        server_errors._fail_on_server_errors(request.node, "call")
    assert agent_api.get("/api/v1/nope").status_code == 404
    server_errors._fail_on_server_errors(request.node, "call")  # a 4xx is no server error


@pytest.mark.server_error_expected("shows the marker")
def test_a_test_marked_as_causing_a_500_passes(failing_capabilities, agent_api):
    agent_api.raise_request_exception = False
    assert agent_api.get("/api/v1/capabilities").status_code == 500


def test_a_served_log_is_read_for_server_errors_once(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(
        b"2026-11-27 10:00:00,000 INFO django.request ok\n"
        b"2026-11-27 10:00:01,000 ERROR django.request Internal Server Error: /api/v1/x\n"
        b"2026-11-27 10:00:02,000 WARNING django.request Not Found: /api/v1/y\n"
        b"ERROR:    Exception in ASGI application\n"
        b"2026-11-27 10:00:02,500 ERROR approvals.agents.mcp.server MCP tool get_proposal failed\n"
        b"2026-11-27 10:00:03,000 ERROR django.request Service Unav"  # still being written
    )
    done = subprocess.Popen(["true"])
    done.wait()
    server = serving.Server(base="", token="", process=done, log=log)
    assert server.server_errors() == [
        "2026-11-27 10:00:01,000 ERROR django.request Internal Server Error: /api/v1/x",
        "ERROR:    Exception in ASGI application",
        "2026-11-27 10:00:02,500 ERROR approvals.agents.mcp.server MCP tool get_proposal failed",
    ]
    with log.open("ab") as more:
        more.write(b"ailable: /healthz\n")
    assert server.server_errors() == [
        "2026-11-27 10:00:03,000 ERROR django.request Service Unavailable: /healthz"
    ]
    assert server.server_errors() == []


@pytest.mark.django_db
def test_digits_that_are_not_ascii_and_cursors_made_by_hand_are_refused_not_500(
    api, reviewer_api, reviewer
):
    """A "²" is a digit to str.isdigit() and not to int(); a cursor's key must have its fields'
    types (a time where the order has a time)."""
    import base64

    from tests.console.conftest import logged_in

    assert_clean(reviewer_api.get("/api/v1/policy/export", {"version": "²"}))
    console = logged_in(reviewer)
    for path in ("/queue/", "/history/"):
        assert console.get(path, {"q": "²"}).status_code == 200
        assert console.get(path, {"q": "#" + "9" * 30}).status_code == 200
    for key in ([1, 2], ["2026-01-01T00:00:00Z", "x"], ["2026-01-01T00:00:00Z", 2**70]):
        raw = json.dumps(["newest", key]).encode()
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        answer = api.get("/api/v1/proposals", {"cursor": cursor})
        assert answer.status_code == 400, answer.content
        assert_clean(answer)
