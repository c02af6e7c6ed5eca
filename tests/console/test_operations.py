"""What operators configure: /metrics behind an optional token, the worker pool."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_metrics_are_open_without_a_token(client, settings):
    settings.METRICS_TOKEN = ""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b'airlock_proposals{status="pending"} 0.0' in response.content


@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong", "Basic c2VjcmV0", "Bearer", "Bearer s3cret-metrics-x", "s3cret-metrics"],
)
def test_metrics_refuse_a_missing_or_wrong_token(client, settings, header):
    settings.METRICS_TOKEN = "s3cret-metrics"
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.get("/metrics", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert response.json()["error"]["type"] == "not_authenticated"
    assert b"airlock_proposals" not in response.content


def test_metrics_answer_the_right_token(client, settings):
    settings.METRICS_TOKEN = "s3cret-metrics"
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics")
    assert response.status_code == 200
    assert b"airlock_sandbox_ok" in response.content


def test_healthz_stays_open_when_metrics_are_guarded(client, settings):
    settings.METRICS_TOKEN = "s3cret-metrics"
    assert client.get("/healthz").json()["checks"]["database"]["ok"] is True


def test_livez_answers_without_touching_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/livez")
    assert response.status_code == 200
    assert response.json() == {"status": "alive"}


def test_a_plain_celery_worker_runs_threads_in_one_process():
    """Sessions live in the worker process that opened them: prefork would scatter them."""
    from console.celery import app

    assert app.conf.worker_pool == "threads"
    assert app.conf.worker_concurrency >= 1


def test_postgresql_connections_come_from_a_bounded_pool():
    """A burst of requests waits for a pooled connection instead of exceeding max_connections."""
    import json
    import os
    import subprocess
    import sys

    from tests.serving import ROOT

    probe = (
        "import django, json; django.setup(); from django.conf import settings; "
        "d = settings.DATABASES['default']; print(json.dumps([d['CONN_MAX_AGE'], d['OPTIONS']]))"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": "postgres://airlock@db.invalid:5432/airlock",
        "DB_POOL_SIZE": "7",
        "SECRET_KEY": "a-key-every-host-shares",
    }
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    max_age, options = json.loads(out)
    assert max_age == 0  # Django's pool needs it; connections go back to the pool
    assert options["pool"] == {"min_size": 1, "max_size": 7, "timeout": 30}
