"""The policy pages: preview before save, versions side by side, suggestions opened as drafts."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.urls import reverse

from approvals.policy.models import PolicyVersion
from approvals.policy.rules import DEFAULT_POLICY, current_policy, update_policy
from tests.approvals.test_policy_preview import stored
from tests.approvals.test_suggestions import reviewed

from .test_admin_pages import editor_post


@pytest.fixture
def waiting(agent):
    """Two proposals held for one reviewer, one for two, under the default policy."""
    current_policy()
    service = {"service_name": "nginx"}
    return [
        stored(agent, "host.restart_service", service, risk=5, step="review", required=1),
        stored(agent, "host.restart_service", service, risk=6, step="review", required=1),
        stored(agent, "host.restart_service", service, risk=8, step="review", required=2),
    ]


def preview_section(html: str) -> str:
    return html[html.index('id="policy-preview"') :].split("</section>")[0]


@pytest.mark.django_db
def test_preview_shows_how_the_draft_moves_proposals_and_saves_nothing(admin_client_, waiting):
    data = editor_post(admin_client_, high_risk_at="5", intent="preview", preview_last="100")
    response = admin_client_.post(reverse("console:policy"), data)
    assert response.status_code == 200
    section = preview_section(response.content.decode())
    assert 'id="preview-moved">2<' in section
    assert "<code>high_risk_at: 7 → 5</code>" in section
    assert "review (1 approval) → review (2 approvals)" in unescape(section)
    for proposal in waiting[:2]:
        assert f'href="{reverse("console:proposal", args=[proposal.pk])}"' in section
    assert "does not call the pre-validator" in section
    assert PolicyVersion.objects.count() == 1
    # The draft stays in the form, to save as it is or edit further.
    assert re.search(r'name="high_risk_at" value="5"', response.content.decode())


@pytest.mark.django_db
def test_the_htmx_preview_is_the_pages_own_partial(admin_client_, waiting):
    data = editor_post(admin_client_, auto_approve_below="6", intent="preview")
    response = admin_client_.post(
        reverse("console:policy"), data, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="policy-preview"
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="card preview" id="policy-preview"')
    assert "<form" not in html and 'id="preview-moved">1<' in html
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_a_draft_that_cannot_be_saved_cannot_be_previewed_either(admin_client_, waiting):
    data = editor_post(admin_client_, auto_approve_below="8", high_risk_at="5", intent="preview")
    response = admin_client_.post(
        reverse("console:policy"), data, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="policy-preview"
    )
    assert response.status_code == 400
    assert "cannot be previewed" in response.content.decode()
    assert "must not be below the auto-approve threshold" in response.content.decode()
    bad_number = editor_post(admin_client_, high_risk_quorum="0", intent="preview")
    response = admin_client_.post(reverse("console:policy"), bad_number)
    assert response.status_code == 400 and "high_risk_quorum: Ensure" in response.content.decode()
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_saving_after_a_preview_puts_the_draft_in_force(admin_client_, waiting):
    data = editor_post(admin_client_, high_risk_at="5", intent="preview")
    admin_client_.post(reverse("console:policy"), data)
    response = admin_client_.post(
        reverse("console:policy"), {**data, "intent": "save"}, follow=True
    )
    assert "Policy version 2 is now in force." in response.content.decode()
    assert current_policy().high_risk_at == 5


@pytest.mark.django_db
def test_two_versions_show_side_by_side_with_the_changes_marked(admin_client_, admin_user):
    current_policy()
    update_policy({**DEFAULT_POLICY, "high_risk_quorum": 3}, admin_user, "three")
    html = admin_client_.get(reverse("console:policy-versions")).content.decode()
    assert "version 1" in html and "version 2" in html
    changed = re.findall(r'<tr class="diff-replace">(.*?)</tr>', html, re.S)
    assert len(changed) == 1
    assert "high_risk_quorum: 2" in changed[0] and "high_risk_quorum: 3" in changed[0]
    assert "1 line differs" in html
    same = admin_client_.get(reverse("console:policy-versions"), {"a": 2, "b": 2}).content.decode()
    assert "The two versions are the same." in same
    missing = admin_client_.get(reverse("console:policy-versions"), {"a": 1, "b": 7})
    assert "there is no version 7" in missing.content.decode()


@pytest.mark.django_db
def test_the_version_list_links_each_version_to_its_changes(admin_client_, admin_user):
    current_policy()
    update_policy({**DEFAULT_POLICY, "high_risk_quorum": 3}, admin_user, "three")
    html = admin_client_.get(reverse("console:policy")).content.decode()
    assert f'href="{reverse("console:policy-versions")}?a=1&amp;b=2"' in html


@pytest.mark.django_db
def test_a_suggestion_opens_as_a_draft_with_its_preview_and_saves_nothing(
    admin_client_, agent, reviewer
):
    current_policy()
    for _ in range(5):
        reviewed(agent, "docker.stop_container", {"container": "web-1"}, [reviewer])
    waiting = stored(agent, "docker.stop_container", {"container": "web-1"}, risk=5,
                     step="review", required=1)  # fmt: skip
    page = admin_client_.get(reverse("console:policy-suggestions")).content.decode()
    assert "<code>container:web-1</code>" in page and "5</strong> approvals" in page
    assert "rita" in page
    link = unescape(re.search(r'<a class="button" href="([^"]+)">Open as draft</a>', page).group(1))
    editor = admin_client_.get(link).content.decode()
    assert 'id="draft-notice"' in editor and "adds container:web-1 to the allow list" in editor
    assert 'value="web-1"' in editor
    section = preview_section(editor)
    assert 'id="preview-moved">6<' in section  # the five reviewers approved, and the waiting one
    assert "<code>allow: + container:web-1</code>" in section
    assert f'href="{reverse("console:proposal", args=[waiting.pk])}"' in section
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_a_stale_rule_opens_as_a_draft_without_it(admin_client_):
    current_policy()
    page = admin_client_.get(reverse("console:policy-suggestions"), {"stale_days": 1})
    html = page.content.decode()
    assert "Every rule has matched" in html  # the only version is newer than a day
    PolicyVersion.objects.update(
        created_at=PolicyVersion.objects.get().created_at.replace(year=2020)
    )
    html = admin_client_.get(
        reverse("console:policy-suggestions"), {"stale_days": 1}
    ).content.decode()
    links = re.findall(r'<a class="button" href="([^"]+)">Open as draft without it</a>', html)
    assert len(links) == 12
    uptime = next(unescape(link) for link in links if "pattern=uptime" in link)
    editor = admin_client_.get(uptime).content.decode()
    assert "drops command:uptime from the allow list" in editor
    assert 'value="uptime"' not in editor and 'value="free -m"' in editor
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_a_malformed_draft_link_opens_the_policy_in_force(admin_client_):
    current_policy()
    html = admin_client_.get(
        reverse("console:policy"), {"add": "nowhere", "kind": "x"}
    ).content.decode()
    assert 'id="draft-notice"' not in html and 'value="uptime"' in html
