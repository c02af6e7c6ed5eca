"""Sandbox backends and the factory that picks one from configuration.

``SANDBOX_BACKEND`` is ``auto`` | ``local`` | ``docker`` | ``gvisor``; ``auto``
picks the strongest backend whose probe succeeds on this host.

``confined_server(spec)``: a long-lived program that speaks on its stdio (the
MCP gateway's stdio upstreams). A host command is confined by the local
backend's namespaces or Landlock (``local.servers``) whatever backend runs
scripts; an image runs as a container (``docker.servers``), under gVisor when
that is the backend in force. Either reaches the network only through the
proxy of ``egress``, to what its list names. ``network_entry`` reads one of a
server's ``host:port`` network entries (``EgressError`` when it is not).
"""

from __future__ import annotations

import threading
from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

from .base import (
    Availability,
    ConfinedServer,
    Limits,
    MemorySink,
    OutputSink,
    RunOutcome,
    RunRequest,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    ServerSpec,
    UnsupportedLanguage,
)
from .egress import EgressError
from .egress import parse as network_entry
from .local.servers import overlaps
from .local.servers import server_command as local_server

__all__ = [
    "Availability",
    "Limits",
    "MemorySink",
    "OutputSink",
    "RunOutcome",
    "RunRequest",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "UnsupportedLanguage",
    "ConfinedServer",
    "EgressError",
    "network_entry",
    "ServerSpec",
    "confined_server",
    "overlaps",
    "BACKENDS",
    "backend_class",
    "probe_all",
    "resolve_backend_name",
    "get_sandbox",
]

# Strongest first: the order ``auto`` tries them in.
BACKENDS = {
    "gvisor": "executions.sandboxes.gvisor.GVisorSandbox",
    "docker": "executions.sandboxes.docker.DockerSandbox",
    "local": "executions.sandboxes.local.LocalSandbox",
}

_lock = threading.Lock()
_instances: dict[str, Sandbox] = {}


def backend_class(name: str) -> type[Sandbox]:
    if name not in BACKENDS:
        raise SandboxUnavailable(
            f"unknown sandbox backend {name!r}; choose one of auto, {', '.join(BACKENDS)}"
        )
    return import_string(BACKENDS[name])


def probe_all() -> dict[str, Availability]:
    """Probe every backend (uncached): what /healthz and the console report."""
    results = {}
    for name in BACKENDS:
        try:
            results[name] = backend_class(name).probe()
        except Exception as exc:  # a probe must never take the caller down
            results[name] = Availability(False, f"probe failed: {exc}")
    return results


@cache
def _auto_choice() -> str:
    for name, availability in probe_all().items():
        if availability.ok:
            return name
    return "local"


def resolve_backend_name(configured: str | None = None) -> str:
    name = configured or settings.SANDBOX_BACKEND
    return _auto_choice() if name == "auto" else name


def get_sandbox(name: str | None = None) -> Sandbox:
    """The process-wide instance of the configured (or named) backend."""
    resolved = resolve_backend_name(name)
    with _lock:
        sandbox = _instances.get(resolved)
        if sandbox is None:
            cls = backend_class(resolved)
            availability = cls.probe()
            if not availability.ok:
                raise SandboxUnavailable(f"sandbox backend {resolved!r}: {availability.reason}")
            sandbox = _instances[resolved] = cls()
        return sandbox


def confined_server(spec: ServerSpec, method: str | None = None) -> ConfinedServer:
    """How to start ``spec`` confined: a command with ``method`` (``unshare`` or
    ``landlock``; the best this host has when None), an image in a container with the
    runtime of ``method`` (``docker`` or ``gvisor``; the backend in force when None)."""
    if not spec.image:
        return local_server(spec, method)
    backend = method or resolve_backend_name()
    if backend not in ("docker", "gvisor", "local"):
        raise SandboxUnavailable(f"a server's image runs with docker or gvisor, not {backend!r}")
    from .docker.servers import server_command as container_server

    return container_server(spec, "runsc" if backend == "gvisor" else None)


def close_all() -> None:
    with _lock:
        for sandbox in _instances.values():
            sandbox.close()
        _instances.clear()
