"""Fixtures for the execution suites: real sandbox backends, or a skip with the reason.

Tests that need a Docker engine, the sandbox image or the runsc runtime skip
when this host lacks them — and fail instead under ``CI=true``, where a
missing engine is a broken pipeline, not a reason to pass.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from executions.sandboxes import Sandbox, backend_class
from tests.support import require


def backend_problem(name: str) -> str | None:
    """Why the named backend cannot run here, or None when it can."""
    try:
        availability = backend_class(name).probe()
    except Exception as exc:  # an import or probe failure is a reason too
        return f"sandbox backend {name!r} cannot be probed: {exc}"
    return None if availability.ok else f"sandbox backend {name!r}: {availability.reason}"


def require_backend(name: str) -> None:
    """Skip (or, under CI=true, fail) unless the named backend works here."""
    problem = backend_problem(name)
    require(problem is None, problem or "")


@pytest.fixture(scope="session")
def docker_ready() -> None:
    require_backend("docker")


@pytest.fixture(scope="session")
def gvisor_ready() -> None:
    require_backend("gvisor")


@pytest.fixture
def make_sandbox() -> Iterator[Callable[..., Sandbox]]:
    """Build backends directly (``make_sandbox(DockerSandbox, mode="oneshot")``); closed afterwards."""
    made: list[Sandbox] = []

    def make(cls: type[Sandbox], **kwargs) -> Sandbox:
        sandbox = cls(**kwargs)
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()


# Every sandbox configuration of this host: (name, backend, constructor kwargs).
SANDBOX_CONFIGS = {
    "local-rlimits": ("local", {"method": "rlimits"}),
    "local-landlock": ("local", {"method": "landlock"}),
    "local-unshare": ("local", {"method": "unshare"}),
    "local-bwrap": ("local", {"method": "bwrap"}),
    "docker-oneshot": ("docker", {"mode": "oneshot"}),
    "docker-keepalive": ("docker", {"mode": "keepalive"}),
    "gvisor-oneshot": ("gvisor", {"mode": "oneshot"}),
    "gvisor-keepalive": ("gvisor", {"mode": "keepalive"}),
}


def selected_configs() -> list[str]:
    """``AIRLOCK_TEST_SANDBOXES`` (comma-separated names above) narrows a pass to those."""
    wanted = [name for name in os.environ.get("AIRLOCK_TEST_SANDBOXES", "").split(",") if name]
    unknown = sorted(set(wanted) - set(SANDBOX_CONFIGS))
    if unknown:
        raise pytest.UsageError(f"AIRLOCK_TEST_SANDBOXES: unknown configurations {unknown}")
    return wanted or list(SANDBOX_CONFIGS)


def _config_problem(backend: str, kwargs: dict) -> str | None:
    problem = backend_problem(backend)
    if problem is None and "method" in kwargs:
        from executions.sandboxes.local import method_problems

        reason = method_problems()[kwargs["method"]]
        problem = reason and f"local method {kwargs['method']} is not usable here: {reason}"
    return problem


@pytest.fixture(scope="module", params=selected_configs())
def any_sandbox(request) -> Iterator[tuple[str, Sandbox]]:
    """(configuration name, instance) for every backend and mode; one instance per module.

    Sharing the instance across a module's tests is deliberate: a keep-alive
    container then serves run after run, which is what cleanliness is about.
    """
    name = request.param
    backend, kwargs = SANDBOX_CONFIGS[name]
    problem = _config_problem(backend, kwargs)
    require(problem is None, problem or "")
    sandbox = backend_class(backend)(**kwargs)
    yield name, sandbox
    sandbox.close()


@pytest.fixture
def systemctl(tmp_path: Path, settings):
    """A stand-in systemctl that records its argv, prints ``output`` and exits with ``code``
    (after ``sleep`` seconds), named by ``HOST_ACTIONS_SYSTEMCTL`` (the path a worker is
    given too); returns the calls it recorded."""
    record = tmp_path / "calls.jsonl"

    def install(output: str = "", code: int = 0, sleep: float = 0, stderr: str = ""):
        path = tmp_path / "systemctl"
        path.write_text(
            textwrap.dedent(
                f"""\
                #!{sys.executable}
                import json, sys, time
                with open({str(record)!r}, "a") as f:
                    f.write(json.dumps(sys.argv) + "\\n")
                time.sleep({sleep})
                sys.stdout.write({output!r})
                sys.stderr.write({stderr!r})
                sys.exit({code})
                """
            )
        )
        path.chmod(0o755)
        settings.HOST_ACTIONS_SYSTEMCTL = str(path)
        return lambda: (
            [json.loads(line) for line in record.read_text().splitlines()]
            if record.exists()
            else []
        )

    return install


ACTIVE = """\
LoadState=loaded
ActiveState=active
SubState=running
UnitFileState=enabled
ActiveEnterTimestamp=Thu 2026-11-26 09:12:44 UTC
NRestarts=2
MainPID=4242
Result=success
Description=A high performance web server = and a reverse proxy
"""
