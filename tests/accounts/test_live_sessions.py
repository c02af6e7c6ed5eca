"""A websocket ends with the session or token that opened it: signed out, idle, too old, revoked."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from accounts import sessions
from accounts.middleware import SEEN_AT
from approvals.core.tokens import create_user_token, revoke_user_token
from approvals.models import UserToken
from console.asgi import application
from tests.accounts.conftest import sign_in

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("in_memory_channel_layer", "consumer_connections_closed"),
]
REVIEWER_PASSWORD = "pw-rita"


@pytest.fixture(autouse=True)
def _quick_checks(settings):
    settings.WEBSOCKET_AUTH_CHECK_SECONDS = 0.2


def queue_socket(cookie: str = "", token: str = "") -> WebsocketCommunicator:
    headers = [(b"origin", b"http://localhost")]
    if cookie:
        headers.append((b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    if token:
        headers = [(b"authorization", f"Bearer {token}".encode())]
    return WebsocketCommunicator(application, "/ws/queue/", headers=headers)


async def signed_in() -> tuple[Client, str]:
    client, response = await database_sync_to_async(sign_in)("rita", REVIEWER_PASSWORD)
    assert response.status_code == 302
    return client, client.cookies[django_settings.SESSION_COOKIE_NAME].value


async def open_and_read(communicator: WebsocketCommunicator) -> None:
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    assert 'id="pending-count"' in await communicator.receive_from(timeout=10)


async def closed_for(communicator: WebsocketCommunicator) -> int:
    while True:
        message = await communicator.receive_output(timeout=5)
        if message["type"] == "websocket.close":
            return message["code"]


async def test_signing_out_everywhere_closes_the_open_live_queue(reviewer):
    _, cookie = await signed_in()
    communicator = queue_socket(cookie)
    await open_and_read(communicator)
    assert await communicator.receive_nothing(timeout=0.6)  # checked, still signed in
    await database_sync_to_async(sessions.end_all)(reviewer)
    assert await closed_for(communicator) == 4401


async def test_an_idle_session_closes_its_socket_and_cannot_open_another(reviewer):
    client, cookie = await signed_in()
    communicator = queue_socket(cookie)
    await open_and_read(communicator)

    def idle() -> None:
        session = client.session
        session[SEEN_AT] -= django_settings.SESSION_IDLE_MINUTES * 60 + 5
        session.save()

    await database_sync_to_async(idle)()
    assert await closed_for(communicator) == 4401
    again = queue_socket(cookie)
    connected, _ = await again.connect(timeout=10)  # accepted only to say why it closes
    assert connected and await closed_for(again) == 4401


async def test_a_revoked_token_closes_its_socket(reviewer):
    token = await database_sync_to_async(create_user_token)(reviewer)
    communicator = queue_socket(token=token)
    await open_and_read(communicator)
    row = await database_sync_to_async(UserToken.objects.get)(user=reviewer)
    await database_sync_to_async(revoke_user_token)(row, "test")
    assert await closed_for(communicator) == 4401
