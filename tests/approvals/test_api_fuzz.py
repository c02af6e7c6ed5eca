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
