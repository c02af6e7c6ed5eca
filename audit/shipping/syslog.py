"""Syslog over TCP (RFC 5424 messages, RFC 6587 octet-counted framing), TLS optional.

``syslog://host:port`` or ``syslog+tls://host:port`` (``?ca=PATH`` for a
private CA). One message per entry: facility "log audit" (13), severity
informational, the JSON entry as the message, its sequence number as
structured data. TCP syslog has no acknowledgements, so a batch counts as
received only when the receiver has read it all: the sink closes its side
and waits for the receiver to close too (a graceful close comes after every
byte before it was read).
"""

from __future__ import annotations

import json
import socket
import ssl

from .base import Sink, moment

PRI = 13 * 8 + 6  # facility 13 (log audit), severity 6 (informational)
ENTERPRISE = 32473  # the private enterprise number kept for examples (RFC 5612)
TIMEOUT_SECONDS = 10


def _printable(text: str, limit: int) -> str:
    """An RFC 5424 header field: printable US-ASCII, no spaces, at most ``limit`` characters."""
    cleaned = "".join(c for c in text if 33 <= ord(c) <= 126)[:limit]
    return cleaned or "-"


def frame(entry: dict, hostname: str) -> bytes:
    at = moment(entry)
    kind = entry["type"]
    structured = f'[airlock@{ENTERPRISE} seq="{entry["seq"]}" type="{kind}"]'
    body = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    message = (
        (
            f"<{PRI}>1 {at} {_printable(hostname, 255)} airlock - {_printable(kind, 32)} "
            f"{structured} "
        ).encode()
        + b"\xef\xbb\xbf"
        + body.encode()
    )
    return f"{len(message)} ".encode() + message


class SyslogSink(Sink):
    def __init__(self, url: str):
        super().__init__(url)
        self.tls = self.parts.scheme == "syslog+tls"

    def send(self, entries: list[dict]) -> None:
        sock = socket.create_connection(
            (self.parts.hostname, self.parts.port), timeout=TIMEOUT_SECONDS
        )
        try:
            if self.tls:
                context = ssl.create_default_context(cafile=self.options.get("ca"))
                sock = context.wrap_socket(sock, server_hostname=self.parts.hostname)
            sock.sendall(b"".join(frame(entry, self.hostname) for entry in entries))
            # Received only once the receiver has read it all: close our side, await theirs.
            if isinstance(sock, ssl.SSLSocket):
                try:
                    sock = sock.unwrap()
                except ssl.SSLEOFError:
                    return  # it closed after our close_notify, without its own: read all
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass
        finally:
            sock.close()
