"""A real HTTP receiver process for the audit sinks: ``python -m tests.audit.http_receiver``.

    python -m tests.audit.http_receiver PORT OUT [--refuse N]

Keeps every POST as a JSON line in OUT (path, headers that matter, body);
with ``--refuse N`` answers the first N posts 503 (kept in OUT as refused).
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with _lock:
            refused = self.server.refuse > 0
            self.server.refuse -= 1
            with open(self.server.out, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "path": self.path,
                            "authorization": self.headers.get("Authorization", ""),
                            "content_type": self.headers.get("Content-Type", ""),
                            "body": body.decode(),
                            "refused": refused,
                        }
                    )
                    + "\n"
                )
        self.send_response(503 if refused else 200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        answer = {"text": "Server busy", "code": 9} if refused else {"text": "Success", "code": 0}
        self.wfile.write(json.dumps(answer).encode())

    def log_message(self, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("out")
    parser.add_argument("--refuse", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    server.out, server.refuse = args.out, args.refuse
    server.serve_forever()


if __name__ == "__main__":
    main()
