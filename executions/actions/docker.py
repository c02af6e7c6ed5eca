"""Docker container actions, carried out with the docker SDK against ``DOCKER_HOST``.

Each runner opens its own short-lived client (``DockerClient.from_env``), so a worker
never holds a stale connection and an unreachable engine is reported per run.
Expected failures (unknown container, unreachable engine, an engine that
refuses) come back as ``failed(...)`` outcomes, never as exceptions.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import requests
from django.conf import settings
from docker.client import DockerClient
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container
from rest_framework import serializers

from dockergate.targets import Targets
from executions.sandboxes.base import RunOutcome
from executions.sandboxes.reaper import LABEL as SANDBOX_LABEL
from infrastructure.rest.serializers import Serializer

from .base import ActionContext, ActionSpec, failed

ACTIONS: list[ActionSpec] = []  # this module's part of the catalog, in order

BACKEND = "docker-engine"

# Seconds for one API call to the engine; stop/restart add their own grace
# period on top (the SDK extends the read timeout by the stop timeout).
ENGINE_TIMEOUT_SECONDS = 15

# A container name as Docker allows it, or an id (full or abbreviated hex,
# which the name pattern covers as well). Anchored with \A..\Z: a trailing
# newline must not slip through the way it does past ``$``.
CONTAINER_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")


class ContainerParameters(Serializer):
    container = serializers.RegexField(
        CONTAINER_PATTERN,
        max_length=128,
        trim_whitespace=False,  # stray whitespace is an error, not something to guess about
        help_text="Container name or id.",
        error_messages={
            "invalid": "must be a container name ([A-Za-z0-9][A-Za-z0-9_.-]*, at most 128) or id"
        },
    )


class LifecycleParameters(ContainerParameters):
    timeout = serializers.IntegerField(
        min_value=0,
        max_value=300,
        required=False,
        help_text="Seconds to wait for the container to stop before it is killed (start ignores it).",
    )


class LogsParameters(ContainerParameters):
    tail = serializers.IntegerField(
        min_value=1,
        max_value=10000,
        required=False,
        help_text="Number of lines from the end of the logs (default: all).",
    )


class NoParameters(Serializer):
    pass


class EngineUnreachable(Exception):
    """The Docker engine did not answer."""


class SandboxContainer(Exception):
    """The container is one of Airlock's own sandboxes."""


class NotATarget(Exception):
    """The container is not one ``DOCKER_ACTION_CONTAINERS`` lets Airlock act on."""


def _container(client: DockerClient, name: str) -> Container:
    """The named container, unless it is an Airlock sandbox or not one the admin allowed.

    Sandboxes hold other executions' code and sessions; an approved action on
    a user's container must never reach into them. The rest must match
    ``DOCKER_ACTION_CONTAINERS`` (a label or a name pattern), which the Docker
    gate of the compose deployment enforces again on every call.
    """
    container = client.containers.get(name)
    labels = container.labels or {}
    if SANDBOX_LABEL in labels:
        raise SandboxContainer(name)
    targets: Targets = settings.DOCKER_ACTION_CONTAINERS
    if not targets.allows(container.name, labels):
        raise NotATarget(
            f"container {name} is not one Airlock may act on: it allows {targets.describe()}"
        )
    return container


@contextmanager
def engine() -> Iterator[DockerClient]:
    """A client for the engine ``DOCKER_HOST`` names, closed afterwards."""
    try:
        client = DockerClient.from_env(timeout=ENGINE_TIMEOUT_SECONDS)
    except DockerException as exc:
        raise EngineUnreachable(str(exc)) from exc
    try:
        yield client
    finally:
        client.close()


def _engine_name() -> str:
    return os.environ.get("DOCKER_HOST") or "the default socket"


def _guarded(
    action: Callable[[DockerClient], RunOutcome], params: dict, ctx: ActionContext
) -> RunOutcome:
    """Run ``action`` with a client, turning the engine's expected failures into outcomes."""
    started = time.monotonic()
    if ctx.cancel.is_set():
        return RunOutcome(exit_code=None, duration_ms=0, backend=BACKEND, cancelled=True)
    container = params.get("container")
    try:
        with engine() as client:
            outcome = action(client)
    except EngineUnreachable as exc:
        message = f"Docker engine unreachable at {_engine_name()}: {exc}"
        return failed(BACKEND, message, ctx.sink, started)
    except SandboxContainer:
        message = f"container {container} is an Airlock sandbox: docker actions do not touch it"
        return failed(BACKEND, message, ctx.sink, started)
    except NotATarget as exc:
        return failed(BACKEND, f"{exc} (DOCKER_ACTION_CONTAINERS)", ctx.sink, started)
    except NotFound as exc:
        message = (
            f"no such container: {container}" if container else f"not found: {exc.explanation}"
        )
        return failed(BACKEND, message, ctx.sink, started)
    except APIError as exc:
        return failed(
            BACKEND, f"Docker engine refused: {exc.explanation or exc}", ctx.sink, started
        )
    except requests.exceptions.RequestException as exc:
        # The engine answered the version probe but dropped or stalled a later call.
        message = f"Docker engine at {_engine_name()} did not answer: {exc}"
        return failed(BACKEND, message, ctx.sink, started)
    outcome.duration_ms = int((time.monotonic() - started) * 1000)
    return outcome


def _done(container: Container, verb: str, ctx: ActionContext) -> RunOutcome:
    try:
        container.reload()
        status = container.status
    except NotFound:
        status = "removed"  # an auto-remove container is gone once stopped: still a success
    ctx.sink.write("stdout", f"{verb} {container.name} ({container.short_id}): {status}\n".encode())
    details = {"container_id": container.id, "name": container.name, "status": status}
    return RunOutcome(exit_code=0, duration_ms=0, backend=BACKEND, details=details)


def run_restart(params: dict, ctx: ActionContext) -> RunOutcome:
    def act(client: DockerClient) -> RunOutcome:
        container = _container(client, params["container"])
        container.restart(timeout=params.get("timeout", 10))
        return _done(container, "restarted", ctx)

    return _guarded(act, params, ctx)


def run_stop(params: dict, ctx: ActionContext) -> RunOutcome:
    def act(client: DockerClient) -> RunOutcome:
        container = _container(client, params["container"])
        container.stop(timeout=params.get("timeout"))
        return _done(container, "stopped", ctx)

    return _guarded(act, params, ctx)


def run_start(params: dict, ctx: ActionContext) -> RunOutcome:
    def act(client: DockerClient) -> RunOutcome:
        container = _container(client, params["container"])
        container.start()
        return _done(container, "started", ctx)

    return _guarded(act, params, ctx)


def run_inspect(params: dict, ctx: ActionContext) -> RunOutcome:
    def act(client: DockerClient) -> RunOutcome:
        container = _container(client, params["container"])
        ctx.sink.write("stdout", (json.dumps(container.attrs, indent=2) + "\n").encode())
        details = {"container_id": container.id, "name": container.name, "status": container.status}
        return RunOutcome(exit_code=0, duration_ms=0, backend=BACKEND, details=details)

    return _guarded(act, params, ctx)


def run_logs(params: dict, ctx: ActionContext) -> RunOutcome:
    def act(client: DockerClient) -> RunOutcome:
        container = _container(client, params["container"])
        # The engine multiplexes the container's stdout and stderr; the SDK's
        # stream keeps their order but not their origin, so both go to stdout
        # in the order the container wrote them, as `docker logs` shows them.
        chunks = container.logs(stream=True, follow=False, tail=params.get("tail", "all"))
        try:
            for chunk in chunks:
                if ctx.cancel.is_set():
                    return RunOutcome(
                        exit_code=None, duration_ms=0, backend=BACKEND, cancelled=True
                    )
                ctx.sink.write("stdout", chunk)
        finally:
            chunks.close()
        details = {"container_id": container.id, "name": container.name}
        return RunOutcome(exit_code=0, duration_ms=0, backend=BACKEND, details=details)

    return _guarded(act, params, ctx)


def run_prune_networks(params: dict, ctx: ActionContext) -> RunOutcome:
    def act(client: DockerClient) -> RunOutcome:
        # Networks Airlock made for its own sandboxes are not the operator's to prune.
        pruned = client.networks.prune(filters={"label!": SANDBOX_LABEL})
        deleted = pruned.get("NetworksDeleted") or []
        lines = [f"deleted network {name}\n" for name in deleted]
        lines.append(f"{len(deleted)} unused network(s) deleted\n")
        ctx.sink.write("stdout", "".join(lines).encode())
        details = {"networks_deleted": deleted}
        return RunOutcome(exit_code=0, duration_ms=0, backend=BACKEND, details=details)

    return _guarded(act, params, ctx)


_CONTAINER = {"container": "container"}

ACTIONS.append(
    ActionSpec(
        name="docker.restart_container",
        description="Restart a Docker container.",
        serializer=LifecycleParameters,
        base_risk=4,
        runner=run_restart,
        targets=_CONTAINER,
    )
)
ACTIONS.append(
    ActionSpec(
        name="docker.stop_container",
        description="Stop a Docker container.",
        serializer=LifecycleParameters,
        base_risk=5,
        runner=run_stop,
        targets=_CONTAINER,
    )
)
ACTIONS.append(
    ActionSpec(
        name="docker.start_container",
        description="Start a stopped Docker container.",
        serializer=LifecycleParameters,
        base_risk=3,
        runner=run_start,
        targets=_CONTAINER,
    )
)
ACTIONS.append(
    ActionSpec(
        name="docker.inspect_container",
        description="Show a Docker container's configuration and state (JSON).",
        serializer=ContainerParameters,
        base_risk=1,
        runner=run_inspect,
        read_only=True,
        targets=_CONTAINER,
    )
)
ACTIONS.append(
    ActionSpec(
        name="docker.container_logs",
        description="Show a Docker container's logs, optionally only the last lines.",
        serializer=LogsParameters,
        base_risk=1,
        runner=run_logs,
        read_only=True,
        targets=_CONTAINER,
    )
)
ACTIONS.append(
    ActionSpec(
        name="docker.prune_networks",
        description="Delete every Docker network no container uses.",
        serializer=NoParameters,
        base_risk=5,
        runner=run_prune_networks,
    )
)
