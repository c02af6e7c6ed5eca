"""A container's live state, as the Docker engine ``DOCKER_HOST`` names describes it.

One inspect (``GET /containers/{name}/json``, after the client's version
probe): the call the Docker gate of the compose deployment lets through for
the containers Docker actions may act on. Nothing is changed. A container the
actions would refuse — an Airlock sandbox, or one ``DOCKER_ACTION_CONTAINERS``
does not allow — is not described either: the page says the action would be
refused, as the gate would.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import requests
from django.conf import settings
from docker.client import DockerClient
from docker.errors import APIError, DockerException, NotFound

from dockergate.targets import Targets
from executions.actions.docker import CONTAINER_PATTERN
from executions.sandboxes.reaper import LABEL as SANDBOX_LABEL

from .base import Fact, Reader, TargetState

NEVER = "0001-01-01T00:00:00Z"  # the engine's "not yet" for StartedAt and FinishedAt
# Docker writes nanoseconds; datetime takes microseconds.
_FRACTION = re.compile(r"(\.\d{6})\d*")


def name(parameters: dict) -> str:
    return str(parameters.get("container", ""))


def moment(text: object) -> datetime | None:
    """An engine timestamp as an aware datetime; None for "never" or what does not parse."""
    if not isinstance(text, str) or not text or text.startswith(NEVER[:10]):
        return None
    try:
        when = datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def state(parameters: dict, seconds: float) -> TargetState:
    blank = TargetState("container", name(parameters))
    if not CONTAINER_PATTERN.match(blank.name):
        return blank.unknown("not a container name")
    try:
        client = DockerClient.from_env(timeout=seconds)
    except DockerException as exc:
        return blank.unknown(f"the Docker engine does not answer: {exc}")
    try:
        attrs = client.api.inspect_container(blank.name)
    except NotFound:
        return TargetState(
            blank.kind, blank.name, "not found", (Fact("Engine", "no such container"),)
        )
    except APIError as exc:
        return blank.unknown(f"the Docker engine refused: {exc.explanation or exc}")
    except (DockerException, requests.exceptions.RequestException) as exc:
        return blank.unknown(f"the Docker engine did not answer: {exc}")
    finally:
        client.close()
    return described(blank, attrs)


def described(blank: TargetState, attrs: dict) -> TargetState:
    """The state an inspect's answer gives, or why it is not shown."""
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    if SANDBOX_LABEL in labels:
        return blank.unknown("an Airlock sandbox: Docker actions never touch it")
    allowed: Targets = settings.DOCKER_ACTION_CONTAINERS
    if not allowed.allows(str(attrs.get("Name", blank.name)), labels):
        return blank.unknown(
            f"not a container Airlock may act on ({allowed.describe()}): the action would fail"
        )
    run = attrs.get("State") or {}
    status = str(run.get("Status") or "unknown")
    facts = [Fact("Image", _image(config, attrs))]
    started, finished = moment(run.get("StartedAt")), moment(run.get("FinishedAt"))
    facts.append(Fact("Started", "never" if started is None else "", started))
    if status not in ("running", "restarting", "paused") and finished is not None:
        facts.append(Fact("Ended", f"exit code {run.get('ExitCode')}", finished))
    if run.get("OOMKilled"):
        facts.append(Fact("Killed", "out of memory"))
    policy = ((attrs.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"
    facts.append(Fact("Restarts", f"{attrs.get('RestartCount', 0)} (restart policy: {policy})"))
    facts.append(Fact("Health", _health(run.get("Health"))))
    return TargetState(
        blank.kind, str(attrs.get("Name", "")).lstrip("/") or blank.name, status, tuple(facts)
    )


def _image(config: dict, attrs: dict) -> str:
    image_id = str(attrs.get("Image", "")).removeprefix("sha256:")[:12]
    named = str(config.get("Image") or "")
    return f"{named} ({image_id})" if named and image_id else named or image_id or "unknown"


def _health(health: object) -> str:
    if not isinstance(health, dict) or not health.get("Status"):
        return "no health check"
    streak = health.get("FailingStreak") or 0
    return f"{health['Status']}" + (f" ({streak} failing in a row)" if streak else "")


READER = Reader("container", name, state)
