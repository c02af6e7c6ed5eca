"""The door: a flood's next proposals turned away before Django, in the event loop.

An agent refused ``too_many_pending`` or ``rate_limited`` moments ago in this
process (``approvals.guard.admission``) gets the same 429 for its next
``POST /api/v1/proposals`` at once: no thread, no query, no log line, only the
count its metrics read, and held a quarter of a second, so a client that ignores
``Retry-After`` slows down instead of spinning. Everyone else's requests never wait behind its flood
in the process's one thread for Django. A withdrawal or a decision in this
process opens the door again at once; elsewhere it opens within half a second.
"""

from __future__ import annotations

import asyncio
import json

from approvals.guard import admission
from approvals.models import hash_token

PROPOSALS = "/api/v1/proposals"
# The door's answer is held this long: a client that does not wait out Retry-After makes
# a few calls a second per connection instead of thousands. (It holds no thread.)
SLOW_DOWN_SECONDS = 0.25


def at_the_door(app):
    """``app`` behind the door (ASGI)."""

    async def door(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == PROPOSALS:
            token = _bearer(scope.get("headers") or ())
            refusal = admission.remembered(hash_token(token)) if token else None
            if refusal is not None:
                await _drain(receive)
                await asyncio.sleep(SLOW_DOWN_SECONDS)  # a client that ignores Retry-After
                await _answer(send, refusal)
                return
        await app(scope, receive, send)

    return door


def _bearer(headers) -> str:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


async def _drain(receive) -> None:
    """Read the request's body to its end (the connection is kept alive for the next)."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            return


async def _answer(send, refusal: admission.Refused) -> None:
    body = json.dumps({"error": {"type": refusal.kind, "message": refusal.message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if refusal.retry_after:
        headers.append((b"retry-after", str(refusal.retry_after).encode()))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
