"""An execution's live output over ``/ws/executions/{id}/?after=SEQ``, resumed after a drop.

The server sends every chunk after ``after``, then live ones, then the final
status, and closes. A connection that drops before the final status is opened
again with the last sequence number seen: nothing is printed twice, nothing
is missed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import connect

from airlock_cli.client import FORBIDDEN, NOT_FOUND, TOKEN_REFUSED, UNREACHABLE, CliError

RECONNECTS = 8
CLOSE_CODES = {
    4401: (TOKEN_REFUSED, "the token was refused"),
    4403: (FORBIDDEN, "this token may not see that execution"),
    4404: (NOT_FOUND, "no such execution (or not yours to see)"),
}


def follow(
    url: str, token: str, execution_id: int, on_chunk: Callable[[dict], None], after: int = 0
) -> dict:
    """Call ``on_chunk`` for each chunk in order; return the final status message."""
    ws_url = url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    last_seq, failures = after, 0
    while True:
        try:
            with connect(
                f"{ws_url}/ws/executions/{execution_id}/?after={last_seq}",
                additional_headers={"Authorization": f"Bearer {token}"},
                open_timeout=15,
                max_size=None,
            ) as socket:
                for raw in socket:
                    message = json.loads(raw)
                    if message.get("type") == "chunk":
                        if message["seq"] > last_seq:
                            on_chunk(message)
                            last_seq = message["seq"]
                            failures = 0
                    elif message.get("type") == "status" and message.get("terminal"):
                        return message
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            if code in CLOSE_CODES:
                exit_code, text = CLOSE_CODES[code]
                raise CliError(exit_code, text) from None
        except InvalidStatus as refused:
            status = refused.response.status_code
            raise CliError(
                TOKEN_REFUSED if status in (401, 403) else UNREACHABLE,
                f"the live output was refused (HTTP {status})",
            ) from None
        except (OSError, WebSocketException, TimeoutError) as exc:
            if failures >= RECONNECTS:
                raise CliError(UNREACHABLE, f"lost the live output: {exc}") from None
        failures += 1
        if failures > RECONNECTS:
            raise CliError(UNREACHABLE, "the live output kept closing before the end")
        time.sleep(min(0.25 * 2**failures, 5))  # then resume after the last chunk seen


def print_chunk(chunk: dict) -> None:
    """A chunk to the stream it came from: stdout to stdout, stderr to stderr."""
    out = sys.stderr if chunk.get("stream") == "stderr" else sys.stdout
    out.write(chunk.get("data", ""))
    out.flush()


def print_json_chunk(chunk: dict) -> None:
    print(json.dumps(chunk), flush=True)
