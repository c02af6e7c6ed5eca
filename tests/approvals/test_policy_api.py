"""The policy endpoints: who may read, simulate and apply; bad input is a 4xx, never a half-write."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from rest_framework.test import APIClient

from approvals.core.tokens import create_user_token
from approvals.policy import text as policy_text
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import current_policy
from audit.models import AuditEvent
from tests.conftest import client_for
from tests.console.conftest import logged_in

from .test_policy_preview import stored

EXPORT = "/api/v1/policy/export"
APPLY = "/api/v1/policy/apply"
SIMULATE = "/api/v1/policy/simulate"
VERSIONS = "/api/v1/policy/versions"


@pytest.fixture
def admin_api(admin_user) -> APIClient:
    return client_for(create_user_token(admin_user))


@pytest.fixture
def policy_yaml(db) -> str:
    return policy_text.version_text()


def call(client: APIClient, endpoint: str, text: str):
    if endpoint in (EXPORT, VERSIONS):
        return client.get(endpoint)
    return client.post(endpoint, {"text": text, "comment": "via the API"}, format="json")


def state() -> tuple:
    return PolicyVersion.objects.count(), AuditEvent.objects.filter(verb="policy.updated").count()


# (endpoint, who may call it)
ENDPOINTS = [
    (EXPORT, {"reviewer", "admin"}),
    (VERSIONS, {"reviewer", "admin"}),
    (SIMULATE, {"reviewer", "admin"}),
    (APPLY, {"admin"}),
]
CALLERS = ["anonymous", "agent", "outsider", "reviewer", "admin"]


@pytest.mark.django_db
@pytest.mark.parametrize(("endpoint", "allowed"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
@pytest.mark.parametrize("caller", CALLERS)
def test_each_endpoint_answers_only_whom_it_should(
    endpoint,
    allowed,
    caller,
    policy_yaml,
    request,
    agent_api,
    outsider_api,
    reviewer_api,
    admin_api,
):
    clients = {
        "anonymous": APIClient(),
        "agent": agent_api,
        "outsider": outsider_api,
        "reviewer": reviewer_api,
        "admin": admin_api,
    }
    before = state()
    response = call(clients[caller], endpoint, policy_yaml)
    if caller in allowed and endpoint == APPLY:
        # A token carries no second factor: kept for the console, nothing written here.
        assert response.status_code == 403, response.content
        assert response.json()["error"]["type"] == "step_up_required"
        assert state() == before
        return
    if caller in allowed:
        assert response.status_code in (200, 201), response.content
        return
    expected = 401 if caller == "anonymous" else 403
    assert response.status_code in (expected, 403), response.content
    body = response.json()["error"]
    assert body["type"] in ("permission_denied", "not_authenticated")
    assert state() == before


@pytest.mark.django_db
def test_export_answers_yaml_for_the_policy_in_force_or_a_version(reviewer_api, admin_user):
    current_policy()
    response = reviewer_api.get(EXPORT)
    assert response["Content-Type"].startswith("application/yaml")
    text = response.content.decode()
    assert text == policy_text.version_text() and "auto_approve_below: 4" in text
    assert reviewer_api.get(EXPORT, {"version": 1}).content.decode() == text
    missing = reviewer_api.get(EXPORT, {"version": 9})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    bad = reviewer_api.get(EXPORT, {"version": "latest"})
    assert bad.status_code == 400 and "version must be a number" in bad.json()["error"]["message"]


def applied_in_console(admin_user, refusal) -> str:
    """Follow an apply's step-up refusal as its admin would: the console page, then apply."""
    url = urlsplit(refusal.json()["error"]["url"])
    assert url.path == "/manage/policy/apply/"
    console = logged_in(admin_user)
    page = console.get(url.path + "?" + url.query)
    assert page.status_code == 200 and 'id="draft-kept"' in page.text
    kept = page.context["form"].initial
    done = console.post(
        url.path,
        {
            "text": kept["text"],
            "comment": kept["comment"],
            "draft": page.context["draft"],
            "intent": "apply",
        },
    )
    assert done.status_code == 302, done.content
    return page.text


@pytest.mark.django_db
def test_apply_keeps_the_text_for_the_console_where_it_goes_in_force(
    admin_api, admin_user, policy_yaml
):
    edited = policy_yaml.replace("high_risk_quorum: 2", "high_risk_quorum: 3")
    refused = admin_api.post(APPLY, {"text": edited, "comment": "three"}, format="json")
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["type"] == "step_up_required"
    assert "second factor" in refused.json()["error"]["message"]
    assert PolicyVersion.objects.count() == 1
    page = applied_in_console(admin_user, refused)
    assert "high_risk_quorum: 2 → 3" in page  # what it changes, shown before it is applied
    assert admin_api.get(EXPORT).content.decode() == edited
    event = AuditEvent.objects.filter(verb="policy.updated").get()
    assert event.actor == "user:ada" and event.data["comment"] == "three"


@pytest.mark.django_db
def test_a_kept_policy_is_for_its_author_alone(admin_api, policy_yaml, db):
    from django.contrib.auth import get_user_model

    refused = admin_api.post(APPLY, {"text": policy_yaml, "comment": "mine"}, format="json")
    other = get_user_model().objects.create_superuser("grace", "g@example.com", "pw-grace")
    url = urlsplit(refused.json()["error"]["url"])
    page = logged_in(other).get(url.path + "?" + url.query)
    assert page.status_code == 200 and 'id="draft-gone"' in page.text


@pytest.mark.django_db
def test_apply_takes_a_raw_yaml_body_with_the_comment_in_the_query(
    admin_api, admin_user, policy_yaml
):
    edited = policy_yaml.replace("review_timeout_minutes: 60", "review_timeout_minutes: 30")
    refused = admin_api.generic(
        "POST", APPLY + "?comment=shorter", edited.encode(), content_type="application/yaml"
    )
    assert refused.status_code == 403, refused.content
    applied_in_console(admin_user, refused)
    assert current_policy().review_timeout_minutes == 30
    assert PolicyVersion.objects.get(version=2).comment == "shorter"


BAD_BODIES = [
    ({"text": "high_risk_at: [\n"}, "validation_error", "line 2, column 1"),
    (
        {"text": "auto_approve_below: 4\n"},
        "validation_error",
        "high_risk_at: This field is required",
    ),
    ({"comment": "no text"}, "validation_error", "text: This field is required"),
    ({"text": 5}, "validation_error", "line 1: expected the policy's settings"),
    (["a", "list"], "validation_error", "expected a JSON object"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "kind", "message"), BAD_BODIES, ids=[b[2][:20] for b in BAD_BODIES]
)
@pytest.mark.parametrize("endpoint", [APPLY, SIMULATE])
def test_bad_input_is_a_json_400_and_writes_nothing(admin_api, endpoint, body, kind, message):
    current_policy()
    before = state()
    response = admin_api.post(endpoint, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == kind
    assert message in response.json()["error"]["message"]
    assert state() == before


@pytest.mark.django_db
def test_a_faulty_policy_names_its_line_and_field(admin_api, policy_yaml):
    faulty = policy_yaml.replace("  pattern: uptime", "  pattern: uptime\n  glob: true")
    response = admin_api.post(APPLY, {"text": faulty}, format="json")
    message = response.json()["error"]["message"]
    line = faulty.split("\n").index("  glob: true") + 1
    assert response.status_code == 400
    assert message.startswith(f"line {line}, allow[4].glob: unknown setting")
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_bodies_that_are_not_text_are_refused(admin_api):
    current_policy()
    not_utf8 = admin_api.generic("POST", APPLY, b"\xff\xfe", content_type="application/yaml")
    assert not_utf8.status_code == 400 and not_utf8.json()["error"]["type"] == "parse_error"
    xml = admin_api.generic("POST", APPLY, b"<policy/>", content_type="application/xml")
    assert xml.status_code == 415
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_simulate_answers_the_moves_and_saves_nothing(reviewer_api, agent, policy_yaml):
    stored(
        agent, "host.restart_service", {"service_name": "nginx"}, risk=5, step="review", required=1
    )
    draft = policy_yaml.replace("auto_approve_below: 4", "auto_approve_below: 6")
    response = reviewer_api.post(SIMULATE, {"text": draft, "last": 50}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["considered"] == 1 and body["moved"] == 1
    assert body["changes"] == ["auto_approve_below: 4 → 6"]
    assert body["moves"][0]["from"] == "review (1 approval)"
    assert body["moves"][0]["to"] == "auto-approved"
    assert body["moves"][0]["examples"][0]["action"] == "host.restart_service"
    assert PolicyVersion.objects.count() == 1
    too_many = reviewer_api.post(SIMULATE, {"text": draft, "last": 10**6}, format="json")
    assert too_many.status_code == 400 and "last" in too_many.json()["error"]["message"]


@pytest.mark.django_db
def test_versions_lists_every_version_newest_first(reviewer_api, admin_user, policy_yaml):
    policy_text.apply_text(policy_yaml, admin_user, "again")
    versions = reviewer_api.get(VERSIONS).json()["versions"]
    assert [(v["version"], v["created_by"], v["comment"]) for v in versions] == [
        (2, "ada", "again"),
        (1, None, "default policy"),
    ]


@pytest.mark.django_db
def test_the_schema_documents_the_policy_endpoints(agent_api):
    schema = agent_api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in (EXPORT, APPLY, SIMULATE, VERSIONS):
        assert path in paths
    assert "application/yaml" in paths[APPLY]["post"]["requestBody"]["content"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "says"),
    [
        (r"\u0015", "not YAML: unacceptable character #x0015"),
        (r"allow:\n- kind: action\n  pattern: \u0007", "not YAML: unacceptable character #x0007"),
        (r"*\udb27\udc96", "line 1, column 2: expected alphabetic or numeric character"),
        (r"*\udb27", "text: Surrogate characters are not allowed: U+DB27."),
    ],
)
def test_characters_yaml_does_not_allow_are_a_400_naming_them(reviewer_api, admin_api, text, says):
    before = PolicyVersion.objects.count()
    body = b'{"text": "' + text.encode() + b'"}'  # as JSON escapes: a lone surrogate too
    for api, path in ((reviewer_api, SIMULATE), (admin_api, APPLY)):
        response = api.generic("POST", path, body, content_type="application/json")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["message"].startswith(says)
    assert PolicyVersion.objects.count() == before
