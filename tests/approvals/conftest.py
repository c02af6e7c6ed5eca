"""Fixtures of the approvals suites: tasks run in-line, Slack and SMTP stand-ins, a routed proposal."""

from __future__ import annotations

import pytest

from console.celery import app as celery_app
from tests.approvals.slack_support import ROUTES, SLACK_SECRET
from tests.approvals.test_cascade import MEDIUM, propose
from tests.conftest import use_policy
from tests.standins import SlackStandIn, smtp_server

SLACK_TOKEN = "xoxb-airlock-test"


@pytest.fixture
def eager_tasks(monkeypatch, django_capture_on_commit_callbacks):
    """Background tasks (notifications) run in-line, after commit, as a worker would.

    Executions are not run here (the execution suites do that); only notifications.
    """
    monkeypatch.setattr("executions.services.enqueue", lambda execution_id, queue: False)
    celery_app.conf.task_always_eager = True
    yield django_capture_on_commit_callbacks
    celery_app.conf.task_always_eager = False


@pytest.fixture
def reviewer_with_mail(reviewer):
    reviewer.email = "rita@example.test"
    reviewer.save()
    return reviewer


@pytest.fixture
def slack(settings):
    """Airlock pointed at a local stand-in of Slack's Web API (recording every call)."""
    standin = SlackStandIn(SLACK_TOKEN).start()
    settings.SLACK_BOT_TOKEN = SLACK_TOKEN
    settings.SLACK_SIGNING_SECRET = SLACK_SECRET
    settings.SLACK_API_URL = standin.api_url
    settings.SITE_URL = "http://airlock.test"
    yield standin
    standin.stop()


@pytest.fixture
def smtp(settings):
    """Mail goes over SMTP to a local aiosmtpd server; yields its inbox."""
    with smtp_server() as (port, inbox):
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.SITE_URL = "http://airlock.test"
        yield inbox


@pytest.fixture
def routed(slack):
    use_policy(slack_routes=ROUTES)
    return slack


@pytest.fixture
def pending(agent_api, routed, eager_tasks) -> dict:
    with eager_tasks(execute=True):
        return propose(agent_api, MEDIUM)
