"""Property: nothing a client sends makes the API answer 5xx; every 4xx has the error shape."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
