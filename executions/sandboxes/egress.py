"""A confined server's one way out: a CONNECT proxy to the hosts its configuration lists.

A confined server (``local.servers``, ``docker.servers``) has a network of its
own with nothing in it but loopback. When its configuration lists hosts
(``network: ["api.github.com:443"]``), something in that network — the local
supervisor, or the relay container whose network a server's container joins —
listens on ``127.0.0.1:EGRESS_PORT`` and hands the listening socket out, once,
over this proxy's UNIX socket; from then on this process accepts the server's
connections on it and, for each, reads one HTTP ``CONNECT host:port`` request
and opens that connection from here, only when the pair is listed. The
server's environment names the proxy (``proxy_variables``: ``HTTPS_PROXY``,
``HTTP_PROXY``, ``ALL_PROXY``), which HTTP clients honour.

What is refused, with a ``403`` that says why and a line in the log:

- a host or port not in the list (``*.example.com`` takes any name under
  example.com, not example.com itself);
- a listed name that resolves to a loopback, link-local, unspecified or
  multicast address (the host's own services, a cloud's metadata service): a
  name in the list cannot be pointed back at Airlock. Such an address is
  reached only when the list names it as an address;
- anything but ``CONNECT`` (plain ``http://`` through a proxy would let one
  connection carry requests to several hosts): ``405``.

Nothing in the server's namespaces carries the bytes (a relay only holds the
network): they go straight from the server's socket to the outside one,
through this process.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass

log = logging.getLogger("executions.sandboxes")

EGRESS_PORT = 3128  # inside the server's own network: nothing else listens there
EGRESS_SOCKET = "/.egress.sock"  # where the handover socket is bound in the server's root
HEAD_LIMIT = 8192
HEAD_SECONDS = 10
CONNECT_SECONDS = 10
MAX_CONNECTIONS = 64  # at once, per server
MAX_ENTRIES = 64

LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
NAME = re.compile(rf"^(\*\.)?{LABEL}(\.{LABEL})*$")


class EgressError(ValueError):
    """A network entry that is not ``host:port``; the message says what is wrong."""


@dataclass(frozen=True)
class Entry:
    host: str  # lowercase name, ``*.`` + a name, or an address
    port: int

    @property
    def address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        with contextlib.suppress(ValueError):
            return ipaddress.ip_address(self.host)
        return None

    def takes(self, host: str, port: int) -> bool:
        if port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse(text: object) -> Entry:
    """``host:port`` (``[::1]:443`` for an IPv6 address) as an entry; ``EgressError``."""
    if not isinstance(text, str):
        raise EgressError(f"{text!r} is not host:port text")
    host, port = _split(text.strip().lower())
    if host is None:
        raise EgressError(f"{text!r} is not host:port (e.g. api.github.com:443)")
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise EgressError(f"{text!r}: the port must be a number from 1 to 65535")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if len(host) > 253 or not NAME.match(host):
            raise EgressError(f"{text!r}: {host!r} is neither a host name nor an address") from None
        return Entry(host, int(port))
    return Entry(str(address), int(port))


def _split(text: str) -> tuple[str | None, str]:
    if text.startswith("["):
        host, bracket, port = text[1:].partition("]:")
        return (host, port) if bracket and ":" in host else (None, "")
    host, colon, port = text.rpartition(":")
    if not colon or not host or ":" in host:
        return None, ""
    return host, port


def parse_all(texts: object) -> tuple[Entry, ...]:
    if not isinstance(texts, (list, tuple)):
        raise EgressError("a list of host:port entries")
    if len(texts) > MAX_ENTRIES:
        raise EgressError(f"at most {MAX_ENTRIES} entries")
    return tuple(dict.fromkeys(parse(text) for text in texts))


def _refused_address(address) -> bool:
    address = getattr(address, "ipv4_mapped", None) or address
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
    )


def proxy_variables() -> dict[str, str]:
    """What HTTP clients read to go through a proxy (curl, Python's, Go's, npm's)."""
    proxy = f"http://127.0.0.1:{EGRESS_PORT}"
    found = {}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        found[name] = found[name.lower()] = proxy
    found["NO_PROXY"] = found["no_proxy"] = "localhost,127.0.0.1,::1"
    return found


class Egress:
    """The proxy of one server, in this process: from ``socket_path``'s handover to ``close``.

    The handover socket lives in a folder of its own, made in ``parent`` with
    ``prefix`` (a name the caller's stale-folder sweep knows), owned by ``uid``
    (the server's, when it is not this process's); ``shared`` opens the folder
    to any uid that can reach it (a container's, which this process cannot chown
    to), the socket being the folder's only content.
    """

    def __init__(
        self,
        name: str,
        entries: tuple[Entry, ...],
        uid: int | None = None,
        *,
        prefix: str,
        parent: str | None = None,
        shared: bool = False,
    ):
        self.name = name
        self.entries = entries
        self.directory = tempfile.mkdtemp(prefix=prefix, dir=parent)
        if uid is not None:
            os.chown(self.directory, uid, uid)
        if shared:
            os.chmod(self.directory, 0o711)
        self.socket_path = os.path.join(self.directory, "egress.sock")
        self._closed = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._handover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._handover.bind(self.socket_path)
        os.chmod(self.socket_path, 0o666)  # a server started by root runs as its own uid
        self._handover.listen(1)
        self._listener: socket.socket | None = None
        threading.Thread(target=self._serve, name=f"egress {name}", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            held = [self._handover, self._listener, *self._open]
            self._open.clear()
        for sock in held:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # --- the handover, then the server's connections ---------------------------------

    def _serve(self) -> None:
        try:
            listener = self._take_listener()
        except OSError:
            return  # closed before the server started
        finally:
            self._handover.close()
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
        if listener is None:
            return
        with self._lock:
            if self._closed.is_set():
                listener.close()
                return
            self._listener = listener
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                _answer(client, 503, "too many connections at once")
                client.close()
                continue
            threading.Thread(
                target=self._one, args=(client,), name=f"egress {self.name}", daemon=True
            ).start()

    def _take_listener(self) -> socket.socket | None:
        """The listening socket the supervisor hands over, once; the handover then closes."""
        connection, _ = self._handover.accept()
        with connection:
            connection.settimeout(HEAD_SECONDS)
            _, fds, _, _ = socket.recv_fds(connection, 16, 4)
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                return None
            listener = socket.socket(fileno=fds[0])
            accepting = listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            if listener.type != socket.SOCK_STREAM or not accepting:
                listener.close()
                return None
            connection.sendall(b"k")  # the supervisor starts the server after this
            return listener

    def _one(self, client: socket.socket) -> None:
        upstream = None
        try:
            self._hold(client)
            upstream, rest = self._connect(client)
            if upstream is None:
                return
            self._hold(upstream)
            client.settimeout(None)
            upstream.settimeout(None)
            if rest:
                upstream.sendall(rest)
            other = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            other.start()
            _pump(client, upstream)
            other.join()
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    self._drop(sock)
            self._slots.release()

    def _connect(self, client: socket.socket) -> tuple[socket.socket | None, bytes]:
        client.settimeout(HEAD_SECONDS)
        head, rest = _read_head(client)
        if head is None:
            _answer(client, 400, "no complete request head")
            return None, b""
        method, _, target = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        target = target.partition(" ")[0]
        if method != "CONNECT":
            _answer(client, 405, f"{method or 'that'}: only CONNECT (use https://)")
            return None, b""
        try:
            asked = parse(target)
        except EgressError:
            asked = None
        if asked is None or asked.host.startswith("*"):
            _answer(client, 400, f"{target!r} is not host:port")
            return None, b""
        host, port = asked.host, asked.port
        entry = next((entry for entry in self.entries if entry.takes(host, port)), None)
        if entry is None:
            return self._refuse(client, 403, f"{target} is not in this server's network list")
        try:
            addresses = _addresses(host, port)
        except OSError as exc:
            return self._refuse(client, 502, f"{host} could not be resolved ({exc.strerror})")
        listed_address = entry.address is not None
        allowed = [a for a in addresses if listed_address or not _refused_address(a[0])]
        if not allowed:
            return self._refuse(
                client,
                403,
                f"{host} resolves to {addresses[0][0]}, an address of the host itself "
                "(loopback, link-local): list the address to reach it",
            )
        try:
            upstream = _dial(allowed)
        except OSError as exc:
            return self._refuse(client, 502, f"{target} did not answer ({exc.strerror or exc})")
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        return upstream, rest

    def _refuse(self, client: socket.socket, status: int, why: str) -> tuple[None, bytes]:
        log.warning("server %s: connection refused: %s", self.name, why)
        _answer(client, status, why)
        return None, b""

    def _hold(self, sock: socket.socket) -> None:
        with self._lock:
            if self._closed.is_set():
                raise OSError("closed")
            self._open.add(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        sock.close()


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_LIMIT:
            return None, b""
        chunk = client.recv(4096)
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _addresses(host: str, port: int) -> list[tuple]:
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(ipaddress.ip_address(info[4][0].split("%")[0]), info) for info in found]


def _dial(addresses: list[tuple]) -> socket.socket:
    error: OSError = OSError("no address")
    for _, (family, kind, proto, _, address) in addresses:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(CONNECT_SECONDS)
        try:
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def _answer(client: socket.socket, status: int, why: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed"}
    reasons |= {502: "Bad Gateway", 503: "Service Unavailable"}
    body = f"airlock: {why}\n".encode()
    head = f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        client.sendall(head.encode() + body)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink``'s writing side."""
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
