"""HTTP sinks: Splunk's HTTP Event Collector, and JSON lines to any receiver.

- ``splunk+https://TOKEN@host:8088`` (``splunk+http://`` without TLS): a
  batch is one POST to ``/services/collector/event`` (or the URL's own path)
  of HEC events, ``Authorization: Splunk TOKEN``.
- ``https://host/path`` (``http://``): a batch is one POST of JSON lines
  (``application/x-ndjson``), ``Authorization: Bearer TOKEN`` when the URL
  carries ``TOKEN@``.

``?ca=PATH`` checks the receiver's certificate against a private CA. A batch
counts as received on a 2xx answer; anything else raises and it is sent again.
"""

from __future__ import annotations

import json
from datetime import datetime
from urllib.parse import unquote, urlunsplit

import requests

from .base import Sink, moment

TIMEOUT_SECONDS = 10
HEC_PATH = "/services/collector/event"


class SinkRefused(Exception):
    """The receiver answered, but not with a 2xx."""


class _HttpSink(Sink):
    content_type = "application/x-ndjson"
    default_path = "/"
    auth_scheme = "Bearer"

    def __init__(self, url: str):
        super().__init__(url)
        scheme = self.parts.scheme.removeprefix("splunk+")
        path = self.parts.path or self.default_path
        self.endpoint = urlunsplit((scheme, self.netloc, path, "", ""))
        self.token = unquote(self.parts.username or "")
        self.session = requests.Session()
        self.session.headers["Content-Type"] = self.content_type
        if self.token:
            self.session.headers["Authorization"] = f"{self.auth_scheme} {self.token}"
        self.verify = self.options.get("ca", True)

    def body(self, entries: list[dict]) -> bytes:
        return b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in entries)

    def send(self, entries: list[dict]) -> None:
        answer = self.session.post(
            self.endpoint, data=self.body(entries), timeout=TIMEOUT_SECONDS, verify=self.verify
        )
        if not 200 <= answer.status_code < 300:
            raise SinkRefused(f"{self.name} answered {answer.status_code}: {answer.text[:200]}")


class JsonLinesSink(_HttpSink):
    pass


class HecSink(_HttpSink):
    content_type = "application/json"
    default_path = HEC_PATH
    auth_scheme = "Splunk"

    def body(self, entries: list[dict]) -> bytes:
        events = []
        for entry in entries:
            at = datetime.fromisoformat(moment(entry))
            events.append(
                {
                    "time": round(at.timestamp(), 6),
                    "host": self.hostname,
                    "source": "airlock",
                    "sourcetype": f"airlock:{entry['type']}",
                    "event": entry,
                }
            )
        return b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in events)
