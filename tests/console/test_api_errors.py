"""Every error under /api/ is JSON ``{"error": {"type", "message"}}`` with the right status.

Including what happens before any view: a body over the size limit, too many
fields, a Host header that is not allowed, an unknown route, a method a view
does not take, Django's own error pages in DEBUG.
"""

from __future__ import annotations

import json

import pytest

from approvals.models import Proposal
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def error(response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert set(body) == {"error"} and body["error"]["type"] == error_type, body
    assert body["error"]["message"]
    return body["error"]["message"]


@pytest.fixture(params=[False, True], ids=["production", "debug"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def test_a_body_over_the_limit_is_413_and_nothing_is_written(agent_api, debug, settings):
    code = "#" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)
    body = {"action": "script.execute", "parameters": {"language": "python", "code": code}}
    response = agent_api.post("/api/v1/proposals", body, format="json")
    message = error(response, 413, "request_too_large")
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in message
    assert Proposal.objects.count() == 0


def test_several_field_errors_read_as_one_sentence_each(agent_api):
    body = {"action": "script.execute", "parameters": {"language": "cobol"}}
    message = error(
        agent_api.post("/api/v1/proposals", body, format="json"), 400, "validation_error"
    )
    assert message == 'language: "cobol" is not a valid choice; code: This field is required'
    body["parameters"] = {"language": "python"}
    message = error(
        agent_api.post("/api/v1/proposals", body, format="json"), 400, "validation_error"
    )
    assert message == "code: This field is required."  # one problem keeps its full stop
    assert Proposal.objects.count() == 0


def test_too_many_query_fields_is_400(agent_api, debug, settings):
    query = "&".join(f"f{n}=1" for n in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    error(agent_api.get(f"/api/v1/capabilities?{query}"), 400, "too_many_fields")


def test_a_host_that_is_not_allowed_is_400(agent_api, debug, settings):
    settings.ALLOWED_HOSTS = ["airlock.example"]
    response = agent_api.get("/api/v1/capabilities", HTTP_HOST="evil.example")
    assert "evil.example" in error(response, 400, "bad_host")
    ok = agent_api.get("/api/v1/capabilities", HTTP_HOST="airlock.example")
    assert ok.status_code == 200


def test_an_unknown_route_is_404(debug):
    assert "/api/v1/nowhere" in error(client_for().get("/api/v1/nowhere"), 404, "not_found")
    error(client_for().post("/api/v2/proposals", {}), 404, "not_found")


def test_a_method_a_route_does_not_take_is_405_with_allow(agent_api, debug):
    for method, path in (("delete", "/api/v1/proposals"), ("post", "/api/v1/schema/")):
        response = getattr(agent_api, method)(path)
        error(response, 405, "method_not_allowed")
        assert response["Allow"]


def test_pages_outside_the_api_keep_their_html(client, debug):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


# --- the database away ------------------------------------------------------------------


@pytest.mark.server_error_expected("503: the database is away")
def test_it_answers_503_with_retry_after_while_the_database_is_away(agent_api, debug, monkeypatch):
    from django.db import OperationalError, connections

    def refused(*args, **kwargs):
        raise OperationalError("connection to server at 'postgres' failed: Connection refused")

    with monkeypatch.context() as patch:
        patch.setattr(connections["default"], "_cursor", refused)  # every query fails
        response = agent_api.get("/api/v1/capabilities")

    message = error(response, 503, "service_unavailable")
    assert "database" in message
    assert response["Retry-After"] == "5"
    assert agent_api.get("/api/v1/capabilities").status_code == 200


@pytest.mark.server_error_expected("503: the database is away")
def test_a_proposal_cut_off_by_the_database_leaves_nothing_behind(agent_api, monkeypatch):
    from django.db import InterfaceError

    from executions.models import Execution

    def cut(actor, event, *args, **kwargs):
        raise InterfaceError("connection already closed")

    body = {"action": "script.execute", "parameters": {"language": "python", "code": "print(1)"}}
    with monkeypatch.context() as patch:
        patch.setattr("approvals.core.services.record", cut)  # after the proposal's row is written
        response = agent_api.post("/api/v1/proposals", body, format="json")

    error(response, 503, "service_unavailable")
    assert (Proposal.objects.count(), Execution.objects.count()) == (0, 0)
    assert agent_api.post("/api/v1/proposals", body, format="json").status_code == 201


def test_a_view_outside_drf_that_loses_the_database_is_503_under_api_only(rf):
    from django.db import OperationalError
    from django.http import HttpResponse

    from infrastructure.rest.errors import api_error_middleware

    middleware = api_error_middleware(lambda request: HttpResponse())
    lost = OperationalError("server closed the connection unexpectedly")

    response = middleware.process_exception(rf.get("/api/v1/anything"), lost)
    error(response, 503, "service_unavailable")
    assert middleware.process_exception(rf.get("/queue/"), lost) is None
    assert middleware.process_exception(rf.get("/api/v1/x"), ValueError("a bug")) is None
