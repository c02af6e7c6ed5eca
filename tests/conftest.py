from __future__ import annotations

import json
import os
import signal
import time
import uuid
import warnings
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from accounts.roles import REVIEWERS_GROUP
from approvals.core.tokens import create_agent, create_user_token

pytest_plugins = ["tests.server_errors"]

DURATIONS = Path(__file__).with_name("durations.json")

# What a test touches the run's database through (pytest-django's fixtures).
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
     "live_server"}
)  # fmt: skip


def _signals_as_from_a_terminal() -> list[str]:
    """SIGINT and SIGHUP at what a terminal gives, where they are ignored; the ones reset.
    Every process a test starts inherits an ignored signal (``cmd &`` from a script, nohup,
    or a test or library that left one so); tests/executions/test_clean_signals.py ignores
    them itself, where that is the point."""
    reset = []
    for signum, default in ((signal.SIGINT, signal.default_int_handler),
                            (signal.SIGHUP, signal.SIG_DFL)):  # fmt: skip
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, default)
            reset.append(signal.Signals(signum).name)
    return reset


def pytest_configure(config):
    _signals_as_from_a_terminal()


@pytest.fixture(autouse=True)
def _signals_kept(request):
    """A test that leaves SIGINT or SIGHUP ignored does not change the tests after it."""
    yield
    if left := _signals_as_from_a_terminal():
        warnings.warn(f"{request.node.nodeid} left {', '.join(left)} ignored", stacklevel=1)


def pytest_collection_modifyitems(config, items):
    """A test that touches no database (no ``django_db`` mark, none of its fixtures, not
    marked ``redis`` or ``postgres``) runs the same whatever the run's DATABASE_URL: it is
    ``any_database`` too, and the PostgreSQL pass leaves it out (scripts/test).

    Files run longest first (``tests/durations.json``, a file's seconds in an earlier
    run; ``python -m tests.durations JUNIT_XML`` writes it again), each file's tests in
    their order: handed out one file at a time (``--dist loadfile --no-loadscope-reorder``),
    two workers then end together instead of one waiting on a long file handed out last.
    """
    items[:] = longest_first(items)
    for item in items:
        if (
            item.get_closest_marker("django_db") is None
            and not DATABASE_FIXTURES & set(item.fixturenames)
            and item.get_closest_marker("redis") is None
            and item.get_closest_marker("postgres") is None
        ):
            item.add_marker(pytest.mark.any_database)


def longest_first(items: list) -> list:
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    known = sorted(seconds.values())
    usual = known[len(known) // 2] if known else 0.0  # a new file: a file's median
    files = list(dict.fromkeys(item.nodeid.split("::", 1)[0] for item in items))
    rank = {name: -seconds.get(name, usual) for name in files}
    return sorted(items, key=lambda item: rank[item.nodeid.split("::", 1)[0]])


@pytest.fixture(autouse=True, scope="session")
def _data_dirs():
    from django.conf import settings

    for folder in settings.CELERY_BROKER_TRANSPORT_OPTIONS.values():
        if isinstance(folder, str) and folder.startswith("/"):
            os.makedirs(folder, exist_ok=True)
    os.makedirs(settings.DATA_DIR, exist_ok=True)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's, and before its test databases go, the output flushers' connections."""
    yield
    from executions.output import flush_threads

    flush_threads().release()


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """Django's recommended test hasher: users are made by the hundred here, logins are not timed."""
    from django.conf import settings
    from django.contrib.auth.hashers import get_hashers

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    get_hashers.cache_clear()


class Isolation:
    """What the policy is told about the sandbox in force: strong unless a test says weak."""

    def __init__(self):
        self.weak_reason: str | None = None

    def weak(self, reason: str = "local: a subprocess with rlimits only") -> None:
        self.weak_reason = reason


@pytest.fixture(autouse=True)
def _a_cache_of_its_own(settings):
    """Each test starts with an empty cache (sign-in failures are counted there): its own key
    prefix, since a shared Redis is not cleared under the other workers' feet."""
    settings.CACHES = {
        alias: {**config, "KEY_PREFIX": f"test-{uuid.uuid4().hex[:12]}"}
        for alias, config in settings.CACHES.items()
    }


@pytest.fixture(autouse=True)
def _decisions_without_step_up(settings):
    """Suites about other things decide at any risk with a console session or a token, as
    an install with STEP_UP_MIN_RISK=11 does; tests/accounts turn step-up on (the default 7)."""
    settings.STEP_UP_MIN_RISK = 11


def with_fresh_factor(client, user, factor: str = "totp"):
    """``client``'s session as allauth leaves it after ``user`` proved a second factor just now.

    For suites about the pages behind a step-up; the factors themselves are proved
    for real in tests/accounts (TOTP codes) and tests/browser (passkeys).
    """
    now = time.time()
    session = client.session
    session["account_authentication_methods"] = [
        {"method": "password", "at": now, "username": user.get_username()},
        {"method": "mfa", "at": now, "type": factor, "id": 0},
    ]
    session["account_authentication_methods_user"] = str(user.pk)
    session.save()
    return client


@pytest.fixture(autouse=True)
def sandbox_isolation(monkeypatch) -> Isolation:
    """Decisions do not depend on the host the suite runs on (the serve tests use the real one)."""
    isolation = Isolation()
    monkeypatch.setattr("executions.sandboxes.status.weak_isolation", lambda: isolation.weak_reason)
    return isolation


def _user(username: str, reviewer: bool = False, superuser: bool = False):
    user = get_user_model().objects.create_user(
        username=username, password="pw-" + username, is_superuser=superuser, is_staff=superuser
    )
    if reviewer:
        user.groups.add(Group.objects.get_or_create(name=REVIEWERS_GROUP)[0])
    return user


@pytest.fixture
def reviewer(db):
    return _user("rita", reviewer=True)


@pytest.fixture
def reviewer2(db):
    return _user("ravi", reviewer=True)


@pytest.fixture
def admin_user(db):
    return _user("ada", superuser=True)


@pytest.fixture
def outsider(db):
    return _user("otto")


@pytest.fixture
def make_agent(db):
    def make(name: str = "bot", capabilities: list[str] | None = None, owner=None):
        return create_agent(name, capabilities or ["*"], owner)

    return make


@pytest.fixture
def agent_and_token(make_agent):
    return make_agent("requester", ["*"])


@pytest.fixture
def agent(agent_and_token):
    return agent_and_token[0]


def client_for(token: str | None = None) -> APIClient:
    client = APIClient()
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def agent_api(agent_and_token) -> APIClient:
    return client_for(agent_and_token[1])


@pytest.fixture
def reviewer_api(reviewer) -> APIClient:
    return client_for(create_user_token(reviewer))


@pytest.fixture
def reviewer2_api(reviewer2) -> APIClient:
    return client_for(create_user_token(reviewer2))


@pytest.fixture
def outsider_api(outsider) -> APIClient:
    return client_for(create_user_token(outsider))


def use_policy(**changes):
    """Put a new policy version in force: the default with ``changes`` applied."""
    from approvals.policy.models import PolicyVersion
    from approvals.policy.rules import DEFAULT_POLICY, current_policy

    current = current_policy()
    data = {**DEFAULT_POLICY, **changes}
    return PolicyVersion.objects.create(version=current.version + 1, data=data, comment="test")


@pytest.fixture
def scripts_allowed(db):
    """Scripts run without review (the sandbox tests exercise what scripts do, not policy)."""
    return use_policy(allow=[{"kind": "action", "pattern": "script.execute", "note": "tests"}])


@pytest.fixture
def local_sandbox(settings):
    """Pin the local backend: these suites test the execution path, not backends.

    (The adversarial and backend suites run every backend.)
    """
    settings.SANDBOX_BACKEND = "local"


@pytest.fixture
def in_memory_channel_layer(settings):
    """Channels' in-memory layer, for suites about what consumers send, not how it travels."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
async def consumer_connections_closed():
    """Consumers query from the sync-to-async worker thread; close its connection so the test
    database can be dropped at the end (PostgreSQL refuses otherwise)."""
    yield
    from channels.db import database_sync_to_async
    from django.db import connections

    await database_sync_to_async(connections.close_all)()
