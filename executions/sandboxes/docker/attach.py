"""One MCP server as a container, seen as a program on stdio: ``python -I attach.py``.

The caller (the gateway's stdio client) spawns this with ``AIRLOCK_SERVER`` in
its environment: the container to create (``servers.py`` wrote and checked it)
and ``DOCKER_HOST`` (the engine, or the Docker gate in the scale deployment).
It creates the container, attaches to its stdin, stdout and stderr, starts it,
copies its own stdin into it and the container's demultiplexed output to its
own stdout and stderr, and exits with the container's status once the output
ends.

A server with a network list comes with a relay (``config["relay"]``,
``relay.py``): this creates and starts it first, waits for its ``ready``, and
creates the server's container in the relay's network
(``container:<relay>``). The relay lives as long as this process holds its
stdin, and is removed with the server.

The container goes with it: its stdin ending (the caller closed the server), a
SIGTERM, SIGINT or SIGHUP remove the container at once; if this process is
killed outright, its attach connection drops, which closes the container's
stdin (``StdinOnce``) and, behind the gate, removes it; the container is also
labelled with this process as its owner, which the sandbox reaper reads.

Only the docker SDK and the standard library: it runs with ``-I`` from no
package, and carries no secret on its command line (the environment the server
gets is in ``AIRLOCK_SERVER``, which only this process's user can read).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import threading

import docker
import docker.errors

MUX_HEADER = struct.Struct("!BxxxI")  # the attach stream's framing (no tty)
CHUNK = 65536
RELAY_SECONDS = 30


class Refused(Exception):
    """A container could not be made or started; the message says why."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _frames(sock: socket.socket):
    """The container's output as (stream, payload) frames, until its stream ends."""
    buffer = bytearray()
    while chunk := sock.recv(CHUNK):
        buffer += chunk
        while len(buffer) >= MUX_HEADER.size:
            stream, size = MUX_HEADER.unpack_from(buffer)
            if len(buffer) < MUX_HEADER.size + size:
                break
            yield stream, bytes(buffer[MUX_HEADER.size : MUX_HEADER.size + size])
            del buffer[: MUX_HEADER.size + size]


def _demux(sock: socket.socket) -> None:
    """The container's stdout and stderr frames onto ours, until its stream ends."""
    for stream, payload in _frames(sock):
        with contextlib.suppress(OSError):  # a reader gone: keep draining the stream
            _write_all(2 if stream == 2 else 1, payload)


def _ready(sock: socket.socket) -> None:
    """Until the relay says ``ready``; ``Refused`` with what it said if it ends first."""
    said = b""
    sock.settimeout(RELAY_SECONDS)
    try:
        for stream, payload in _frames(sock):
            if stream == 1 and payload.startswith(b"ready"):
                sock.settimeout(None)
                return
            said += payload
    except OSError as exc:
        raise Refused(f"the network relay did not start ({exc})") from exc
    last = said.decode(errors="replace").strip().splitlines()[-1:] or ["no word"]
    raise Refused(f"the network relay did not start: {last[0]}")


def _feed(sock: socket.socket, done) -> None:
    """Our stdin into the container's, then ``done`` when it ends (the caller closed us)."""
    try:
        while data := os.read(0, CHUNK):
            sock.sendall(data)
    except OSError:
        pass
    done()


def _owner() -> str:
    """This process, as the sandbox reaper names an owner: host, pid and start time."""
    with open("/proc/self/stat") as stat:
        start = stat.read().rsplit(")", 1)[1].split()[19]
    return f"{socket.gethostname()}:{os.getpid()}:{start}"


def create(api: docker.APIClient, config: dict) -> str:
    """The container ``config`` describes, created (not started); its id."""
    created = api.create_container(
        config["image"],
        command=config["command"] or None,
        user=config["user"],
        working_dir=config["working_dir"],
        stdin_open=True,  # with attach: StdinOnce, its stdin closes when we go
        tty=False,
        hostname=config["hostname"],
        environment=config["env"],
        labels=config["labels"],
        host_config=api.create_host_config(**config["host_config"]),
    )
    return created["Id"]


def _attach(api: docker.APIClient, cid: str) -> socket.socket:
    """``cid``'s stdio as one socket (attached before the start, so nothing is missed)."""
    attached = api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    sock = getattr(attached, "_sock", attached)
    sock.settimeout(None)  # a server may be quiet for hours
    return sock


def _started(
    api: docker.APIClient, config: dict, made: list[str], held: list[socket.socket]
) -> socket.socket:
    """The relay (if any), then the server: created, attached and started; the server's
    stdio. Every container made is in ``made`` as soon as it exists; the relay's stdio is
    in ``held`` (the relay lives while it is open)."""
    relay = config.pop("relay", None)
    try:
        if relay is not None:
            relay["labels"]["airlock.owner"] = config["labels"]["airlock.owner"]
            made.append(create(api, relay))
            relay_sock = _attach(api, made[-1])
            api.start(made[-1])
            held.append(relay_sock)
            _ready(relay_sock)
            config["host_config"]["network_mode"] = f"container:{made[-1]}"
            config["hostname"] = None  # the relay's, with its network
        made.append(create(api, config))
        sock = _attach(api, made[-1])
        api.start(made[-1])
        return sock
    except docker.errors.ImageNotFound as exc:
        image = relay["image"] if relay is not None and not made else config["image"]
        raise Refused(f"image {image} is not on the engine") from exc
    except docker.errors.APIError as exc:
        raise Refused(f"the engine refused the container: {exc.explanation}") from exc
    except (docker.errors.DockerException, OSError) as exc:
        raise Refused(f"the container did not start: {exc}") from exc


def main() -> int:
    config = json.loads(os.environ.pop("AIRLOCK_SERVER"))
    config["labels"]["airlock.owner"] = _owner()
    try:
        api = docker.from_env(timeout=30).api
    except docker.errors.DockerException as exc:
        print(f"cannot reach the Docker engine ({exc})", file=sys.stderr)
        return 125
    made: list[str] = []
    held: list[socket.socket] = []
    removed = threading.Event()

    def remove(*_args) -> None:
        if not removed.is_set():
            removed.set()
            for cid in reversed(made):  # the server, then its relay
                with contextlib.suppress(docker.errors.DockerException, OSError):
                    api.remove_container(cid, force=True)

    def end(signum, _frame) -> None:
        remove()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, end)
    try:
        sock = _started(api, config, made, held)
    except Refused as exc:
        remove()
        print(exc, file=sys.stderr)
        return 125
    cid = made[-1]
    threading.Thread(target=_feed, args=(sock, remove), daemon=True).start()
    with contextlib.suppress(OSError):
        _demux(sock)
    status = 0
    if not removed.is_set():
        with contextlib.suppress(docker.errors.DockerException, OSError):
            status = api.wait(cid, timeout=10).get("StatusCode", 0)
    remove()
    return status


if __name__ == "__main__":
    sys.exit(main())
