"""The channel to a container's resident runner: its attached stdin/stdout.

Docker multiplexes the attach stream (``MUX_HEADER``); inside the stdout
stream the runner sends frames (``FRAME``: a kind byte and a length). The host
sends length-prefixed JSON requests.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import time
from typing import Any

from ..base import SandboxError

MUX_HEADER = struct.Struct("!BxxxI")  # docker's attach stream framing (tty off)
FRAME = struct.Struct("!cI")  # the runner's framing
LENGTH = struct.Struct("!I")
FRAME_KINDS = (b"R", b"1", b"2", b"X", b"!")
MAX_FRAME = 4 * 1024 * 1024  # the runner sends at most 256 KiB of output per frame


class RunnerGone(SandboxError):
    """The runner's stream ended: the container stopped or was removed."""


class RunnerChannel:
    """The attached stdin/stdout of one container, speaking the runner protocol."""

    def __init__(self, sock: Any) -> None:
        self._holder = sock  # keeps docker-py's response (and the connection) alive
        self.sock: socket.socket = getattr(sock, "_sock", sock)
        self.sock.setblocking(False)
        self._mux = bytearray()
        self._stdout = bytearray()
        self.stderr_tail = b""
        self.closed = False

    def send(self, message: dict) -> None:
        payload = json.dumps(message).encode()
        data = memoryview(LENGTH.pack(len(payload)) + payload)
        while data:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                select.select([], [self.sock], [], 1.0)
                continue
            except OSError as exc:
                raise RunnerGone(f"cannot reach the sandbox runner: {exc}") from exc
            data = data[sent:]

    def next_frame(self, timeout: float) -> tuple[bytes, bytes] | None:
        """The next runner frame, or None when nothing arrived within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self._parse_frame()
            if frame is not None:
                return frame
            if self.closed:
                raise RunnerGone(self._gone_message())
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.sock], [], [], remaining)[0]:
                return None
            self._receive()

    def _receive(self) -> None:
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return
        self._mux += data
        self._demux()

    def _demux(self) -> None:
        view = self._mux
        offset = 0
        while len(view) - offset >= MUX_HEADER.size:
            stream, size = MUX_HEADER.unpack_from(view, offset)
            end = offset + MUX_HEADER.size + size
            if len(view) < end:
                break
            payload = view[offset + MUX_HEADER.size : end]
            if stream == 1:
                self._stdout += payload
            else:
                self.stderr_tail = (self.stderr_tail + bytes(payload))[-4096:]
            offset = end
        del self._mux[:offset]

    def _parse_frame(self) -> tuple[bytes, bytes] | None:
        if len(self._stdout) < FRAME.size:
            return None
        kind, size = FRAME.unpack_from(self._stdout)
        if kind not in FRAME_KINDS or size > MAX_FRAME:
            # Not the runner's framing: a run wrote into its stdout. End it now.
            self.closed = True
            raise RunnerGone("the run broke the sandbox protocol")
        end = FRAME.size + size
        if len(self._stdout) < end:
            return None
        payload = bytes(self._stdout[FRAME.size : end])
        del self._stdout[:end]
        return kind, payload

    def _gone_message(self) -> str:
        tail = self.stderr_tail.decode(errors="replace").strip()
        return "the sandbox container stopped" + (f": {tail[-500:]}" if tail else "")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        self.closed = True
