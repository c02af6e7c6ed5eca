"""Helpers shared by the suites."""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(available: bool, reason: str) -> None:
    """Skip when a real component is missing here; under CI=true, fail instead."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{reason} (required under CI=true)", pytrace=False)
    pytest.skip(reason)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def have(executable: str) -> bool:
    return shutil.which(executable) is not None


def wait_for(predicate: Callable, timeout: float = 15.0, explain: Callable[[], str] = str):
    """Poll until ``predicate()`` is truthy and return it; fail with ``explain()`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met in {timeout}s {explain()}")


def assert_container_removed(container: str, within: float = 10.0) -> None:
    """Fail unless the Docker engine forgets ``container`` within ``within`` seconds."""
    import docker

    client = docker.from_env()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(container)
        except docker.errors.NotFound:
            return
        time.sleep(0.1)
    pytest.fail(f"container {container} is still there")
