"""Settings that name classes by the dotted paths they had before the app's packages keep working."""

from __future__ import annotations

import pytest

from approvals.moved import MOVED, current_path, import_class
from approvals.notify.console import ConsoleNotifier
from approvals.notify.email import EmailNotifier
from approvals.notify.outbox import notifiers
from approvals.notify.webhooks import WebhookNotifier
from approvals.policy.prevalidators import OpenAIChatPreValidator, get_prevalidator
from approvals.policy.risk import DEFAULT_RISK_SCORERS, get_scorers
from approvals.policy.risk.scorers import CodeScorer


def test_every_old_path_names_a_class_that_is_there():
    assert {path: import_class(path).__name__ for path in MOVED} == {
        "approvals.notifications.ConsoleNotifier": "ConsoleNotifier",
        "approvals.notifications.EmailNotifier": "EmailNotifier",
        "approvals.notifications.WebhookNotifier": "WebhookNotifier",
    }


def test_notifiers_named_as_before_are_the_channels_of_now(settings):
    settings.NOTIFIERS = [
        "approvals.notifications.ConsoleNotifier",
        "approvals.notifications.EmailNotifier",
        "approvals.notifications.WebhookNotifier",
        "approvals.slack.notifier.SlackNotifier",
    ]
    assert [type(n).__name__ for n in notifiers()] == [
        "ConsoleNotifier",
        "EmailNotifier",
        "WebhookNotifier",
        "SlackNotifier",
    ]
    assert isinstance(notifiers()[0], ConsoleNotifier)
    assert isinstance(notifiers()[1], EmailNotifier)
    assert isinstance(notifiers()[2], WebhookNotifier)


def test_risk_scorers_named_as_before_score_as_now(settings):
    settings.RISK_SCORERS = [
        p.replace("approvals.policy.risk.", "approvals.risk.") for p in DEFAULT_RISK_SCORERS
    ]
    loaded = get_scorers()
    assert [path for path, _ in loaded] == settings.RISK_SCORERS
    assert any(isinstance(scorer, CodeScorer) for _, scorer in loaded)


def test_the_pre_validator_named_as_before_is_found(settings):
    settings.PREVALIDATOR_CLASS = "approvals.prevalidators.OpenAIChatPreValidator"
    settings.PREVALIDATOR_URL = "http://127.0.0.1:9/v1"
    settings.PREVALIDATOR_MODEL = "a-model"
    assert isinstance(get_prevalidator(), OpenAIChatPreValidator)


@pytest.mark.parametrize(
    "path",
    [
        "approvals.policy.risk.scorers.CodeScorer",
        "mycompany.scorers.Strict",
        "approvals.models.Agent",
    ],
)
def test_a_path_that_did_not_move_is_left_alone(path):
    assert current_path(path) == path
