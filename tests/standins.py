"""Local stand-ins for the outside services Airlock talks to, started by the tests.

- ``SlackStandIn``: the Slack Web API methods Airlock calls (chat.postMessage,
  chat.update, views.open) and interaction response URLs, on a local port,
  recording every call and keeping the messages as Slack would;
  ``slack_signed`` signs a request body exactly as Slack signs its requests.
- ``smtp_server``: a real SMTP server (aiosmtpd) that keeps what it receives.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- Slack ------------------------------------------------------------------------------


class _SlackHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = self.headers.get("Content-Type", "")
        body = json.loads(raw or b"{}") if "json" in kind else dict(parse_qsl(raw.decode()))
        status, answer = self.server.standin.handle(
            self.path, body, self.headers.get("Authorization", "")
        )
        payload = answer if isinstance(answer, str) else json.dumps(answer)
        self.send_response(status)
        self.send_header(
            "Content-Type", "text/plain" if isinstance(answer, str) else "application/json"
        )
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args):
        pass


class SlackStandIn:
    """Answers like Slack's Web API: channels by name or id, DMs to user ids, ts per message."""

    def __init__(self, token: str):
        self.token = token
        self.calls: list[dict] = []
        self.messages: dict[tuple[str, str], dict] = {}
        self.failures: dict[str, list[tuple[int, dict]]] = {}
        self.channels: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _SlackHandler)
        self._server.standin = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.api_url = self.url + "/api/"
        self.response_url = self.url + "/respond/T1/1234/abcd"

    def start(self) -> SlackStandIn:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, method: str, *answers: tuple[int, dict]) -> None:
        """The next calls of ``method`` get these answers instead (status, body)."""
        self.failures.setdefault(method, []).extend(answers)

    def handle(self, path: str, body: dict, authorization: str) -> tuple[int, object]:
        with self._lock:
            method = path.rsplit("/", 1)[-1] if path.startswith("/api/") else "response_url"
            self.calls.append({"method": method, "path": path, "body": body})
            if self.failures.get(method):
                return self.failures[method].pop(0)
            if method == "response_url":
                return 200, "ok"
            if authorization != f"Bearer {self.token}":
                return 200, {"ok": False, "error": "invalid_auth"}
            return 200, getattr(self, "_" + method.replace(".", "_"), self._unknown)(body)

    def _chat_postMessage(self, body: dict) -> dict:  # noqa: N802 - Slack's method name
        channel = self._channel_id(body["channel"])
        ts = f"{1_700_000_000 + len(self.messages)}.000100"
        self.messages[(channel, ts)] = body
        return {"ok": True, "channel": channel, "ts": ts, "message": body}

    def _chat_update(self, body: dict) -> dict:
        key = (body.get("channel"), body.get("ts"))
        if key not in self.messages:
            return {"ok": False, "error": "message_not_found"}
        self.messages[key] = body
        return {"ok": True, "channel": key[0], "ts": key[1]}

    def _views_open(self, body: dict) -> dict:
        if not body.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        return {"ok": True, "view": {"id": "V0001", **body["view"]}}

    def _unknown(self, body: dict) -> dict:
        return {"ok": False, "error": "unknown_method"}

    def _channel_id(self, channel: str) -> str:
        if channel.startswith("#"):
            return self.channels.setdefault(channel, f"C{len(self.channels) + 1:08d}")
        if channel.startswith("U"):
            return "D" + channel[1:]  # a direct message lands in the bot's DM with the user
        return channel

    def called(self, method: str) -> list[dict]:
        return [call["body"] for call in self.calls if call["method"] == method]


def blocks_text(message: dict) -> str:
    """Every piece of text in a message's blocks, for assertions."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "text" and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(message.get("blocks", []))
    return "\n".join(found)


def action_ids(message: dict) -> list[str]:
    return [
        element["action_id"]
        for block in message.get("blocks", [])
        if block.get("type") == "actions"
        for element in block["elements"]
    ]


def slack_signature(secret: str, timestamp: str, body: str) -> str:
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def slack_signed(client, path: str, body: str, secret: str, timestamp: int | None = None):
    """POST ``body`` (form-encoded) to ``path`` with Slack's signature headers."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return client.post(
        path,
        data=body,
        content_type="application/x-www-form-urlencoded",
        HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp,
        HTTP_X_SLACK_SIGNATURE=slack_signature(secret, stamp, body),
    )


def interaction_body(payload: dict) -> str:
    return urlencode({"payload": json.dumps(payload)})


# --- SMTP ------------------------------------------------------------------------------


class Inbox:
    """What the SMTP server received; ``refuse`` makes the next deliveries fail with 451."""

    def __init__(self):
        self.messages: list[email.message.EmailMessage] = []
        self.refuse = 0

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's naming
        if self.refuse:
            self.refuse -= 1
            return "451 4.3.0 try again later"
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append(message)
        return "250 OK"

    def to(self, address: str) -> list[email.message.EmailMessage]:
        return [m for m in self.messages if address in m["To"]]


def mail_text(message) -> str:
    return message.get_body(preferencelist=("plain",)).get_content()


def review_path(message) -> str:
    """The path of the review link in a mail."""
    match = re.search(r"https?://[^/\s]+(/review/[^\s]+/)", mail_text(message))
    assert match, mail_text(message)
    return match.group(1)


@contextmanager
def smtp_server() -> Iterator[tuple[int, Inbox]]:
    from aiosmtpd.controller import Controller

    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield controller.port, inbox
    finally:
        controller.stop()
