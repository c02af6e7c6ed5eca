"""The profile page: a person's channels, risk bands, quiet hours, mail address and Slack link."""

from __future__ import annotations

from datetime import UTC, datetime, time

import pytest
from django.urls import reverse

from approvals.notify.models import ReviewerPreferences, preferences_for

pytestmark = pytest.mark.django_db

PROFILE = reverse("console:profile")


def test_a_new_reviewer_sees_the_defaults(reviewer_client, reviewer):
    html = reviewer_client.get(PROFILE).content.decode()
    assert 'name="console" id="id_console" checked' in html
    assert 'name="email" id="id_email" checked' in html
    assert 'name="slack" id="id_slack" checked' not in html
    assert html.count('name="bands"') == 3 and html.count('name="bands" value') == 3
    assert "Slack is not set up on this Airlock" in html
    assert not ReviewerPreferences.objects.exists()  # looking changes nothing


def test_saving_preferences(reviewer_client, reviewer):
    response = reviewer_client.post(
        PROFILE,
        {
            "email": "on",
            "slack": "on",
            "bands": ["high", "medium"],
            "quiet_from": "22:00",
            "quiet_until": "07:30",
            "time_zone": "Europe/Berlin",
            "address": "rita@example.test",
        },
        follow=True,
    )
    assert "Your preferences are saved." in response.content.decode()
    saved = ReviewerPreferences.objects.get(user=reviewer)
    assert (saved.console, saved.email, saved.slack) == (False, True, True)
    assert saved.bands == ["medium", "high"]
    assert (saved.quiet_from, saved.quiet_until) == (time(22), time(7, 30))
    assert saved.time_zone == "Europe/Berlin"
    reviewer.refresh_from_db()
    assert reviewer.email == "rita@example.test"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"quiet_from": "22:00"}, "need both a start and an end"),
        ({"quiet_from": "08:00", "quiet_until": "08:00"}, "cannot start and end at the same time"),
        ({"quiet_from": "25:00", "quiet_until": "07:00"}, "Enter a valid time"),
        ({"time_zone": "Mars/Olympus"}, "Select a valid choice"),
        ({"bands": ["extreme"]}, "Select a valid choice"),
        ({"address": "not an address"}, "Enter a valid email address"),
    ],
)
def test_bad_preferences_are_refused_with_the_reason(reviewer_client, reviewer, data, message):
    response = reviewer_client.post(PROFILE, data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not ReviewerPreferences.objects.exists()
    reviewer.refresh_from_db()
    assert reviewer.email == ""


def test_quiet_hours_across_midnight_in_the_persons_time_zone(reviewer):
    preferences = ReviewerPreferences(
        user=reviewer, quiet_from=time(22), quiet_until=time(7), time_zone="Asia/Tokyo"
    )
    assert preferences.is_quiet_at(datetime(2026, 1, 5, 14, 0, tzinfo=UTC))  # 23:00 in Tokyo
    assert preferences.is_quiet_at(datetime(2026, 1, 5, 21, 59, tzinfo=UTC))  # 06:59
    assert not preferences.is_quiet_at(datetime(2026, 1, 5, 22, 0, tzinfo=UTC))  # 07:00
    assert not preferences.is_quiet_at(datetime(2026, 1, 5, 3, 0, tzinfo=UTC))  # 12:00
    daytime = ReviewerPreferences(user=reviewer, quiet_from=time(12), quiet_until=time(13))
    assert daytime.is_quiet_at(datetime(2026, 1, 5, 12, 30, tzinfo=UTC))
    assert not daytime.is_quiet_at(datetime(2026, 1, 5, 13, 0, tzinfo=UTC))


def test_wants_combines_channel_band_and_quiet_hours(reviewer):
    noon = datetime(2026, 1, 5, 12, tzinfo=UTC)
    preferences = preferences_for(reviewer)
    assert preferences.wants("email", 2, noon) and preferences.wants("console", 9, noon)
    assert not preferences.wants("slack", 5, noon)  # not linked, not asked for
    preferences.slack, preferences.slack_user_id = True, "U1"
    preferences.bands = ["high"]
    assert preferences.wants("slack", 7, noon) and not preferences.wants("slack", 6, noon)
    preferences.quiet_from, preferences.quiet_until = time(11), time(13)
    assert not preferences.wants("slack", 9, noon)


def test_a_link_code_is_shown_once_when_slack_is_set_up(reviewer_client, reviewer, settings):
    settings.SLACK_BOT_TOKEN, settings.SLACK_SIGNING_SECRET = "xoxb-1", "secret"
    html = reviewer_client.post(reverse("console:profile-slack-code")).content.decode()
    assert 'id="link-code">/airlock link ' in html and "within 10 minutes" in html
    again = reviewer_client.get(PROFILE).content.decode()
    assert 'id="link-code"' not in again and 'id="slack-code"' in again


def test_without_slack_no_code_is_made(reviewer_client, reviewer):
    response = reviewer_client.post(reverse("console:profile-slack-code"), follow=True)
    assert "Slack is not set up on this Airlock." in response.content.decode()
    assert not ReviewerPreferences.objects.exists()


def test_the_header_links_reviewers_to_their_profile(reviewer_client):
    html = reviewer_client.get(reverse("console:queue")).content.decode()
    assert f'class="who" href="{PROFILE}"' in html
