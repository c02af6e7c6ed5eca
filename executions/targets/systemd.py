"""A systemd service's live state on this host, as ``systemctl show`` describes it.

Read the way the host service actions run systemctl (``executions.actions.host.run_argv``):
``HOST_ACTIONS_SYSTEMCTL``, an argument list and never a shell, a scrubbed
environment, its own process group killed at the deadline. Only ``show``,
which changes nothing.

A service on this host (``WORKER_HOSTNAME``: the embedded deployment's console
runs where its host actions run) is read here; one on another host by that
host's worker, asked through the broker while the page waits (``remote``), the
same read run there (``here``).
"""

from __future__ import annotations

from django.conf import settings

from executions.actions.base import ActionContext
from executions.actions.host import HOST_PATTERN, SERVICE_PATTERN, run_argv
from executions.sandboxes.base import Limits, MemorySink

from . import remote
from .base import Fact, Reader, TargetState

KIND = "service"

PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "ActiveEnterTimestamp",
    "NRestarts",
    "MainPID",
    "Result",
    "Description",
)
OUTPUT_CAP = 64 * 1024


def _host(parameters: dict) -> str:
    return str(parameters.get("host") or settings.HOST_ACTIONS_DEFAULT_HOST or "")


def name(parameters: dict) -> str:
    service, host = str(parameters.get("service_name", "")), _host(parameters)
    return f"{service} on {host}" if host else service


def _unit_name(parameters: dict) -> str:
    """The service's name if it is one systemctl takes as a unit (never an option), else ""."""
    service = str(parameters.get("service_name", ""))
    return service if not service.startswith("-") and SERVICE_PATTERN.match(service) else ""


def argv(service: str) -> list[str]:
    """The read-only command: ``systemctl show`` of exactly these properties of ``service``."""
    return [settings.HOST_ACTIONS_SYSTEMCTL, "show", "--property=" + ",".join(PROPERTIES), service]


def state(parameters: dict, seconds: float) -> TargetState:
    blank = TargetState(KIND, name(parameters))
    host = _host(parameters)
    if host == settings.WORKER_HOSTNAME:
        return here(parameters, seconds)
    if not _unit_name(parameters) or not HOST_PATTERN.match(host):
        return blank.unknown("not a unit name on a host name")  # nothing is asked of anyone
    if not remote.possible():
        return blank.unknown(
            f"only {host or 'its host'}'s worker reads its services, and this deployment "
            "has no broker between hosts"
        )
    return remote.ask(host, KIND, parameters, seconds, blank)


def here(parameters: dict, seconds: float) -> TargetState:
    """The service's state read on this host (a worker answering for its host runs this)."""
    blank = TargetState(KIND, name(parameters))
    service = _unit_name(parameters)
    if not service:
        return blank.unknown("not a unit name")
    sink = MemorySink(OUTPUT_CAP)
    limits = Limits(timeout_seconds=seconds)  # its process group is killed then
    outcome = run_argv(argv(service), ActionContext(sink=sink, limits=limits))
    sink.close()
    if outcome.timed_out:
        return blank.unknown(f"systemctl did not answer within {seconds:g} s")
    if outcome.error or outcome.exit_code != 0:
        said = (sink.stderr.strip().splitlines() or [outcome.error or ""])[0]
        return blank.unknown(f"systemctl show failed (exit code {outcome.exit_code}): {said}"[:300])
    return described(blank, parse(sink.stdout))


def parse(text: str) -> dict[str, str]:
    """``Key=Value`` lines (a value may hold ``=``); the last of a repeated key wins."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in PROPERTIES:
            found[key] = value.strip()
    return found


def described(blank: TargetState, shown: dict[str, str]) -> TargetState:
    if shown.get("LoadState") == "not-found":
        return TargetState(blank.kind, blank.name, "not found", (Fact("systemd", "no such unit"),))
    active = shown.get("ActiveState") or "unknown"
    sub = shown.get("SubState")
    facts = [Fact("State", f"{active} ({sub})" if sub else active)]
    if shown.get("ActiveEnterTimestamp"):
        facts.append(Fact("Since", shown["ActiveEnterTimestamp"]))
    if shown.get("NRestarts"):
        facts.append(Fact("Restarts", shown["NRestarts"]))
    if shown.get("MainPID") not in (None, "", "0"):
        facts.append(Fact("Main PID", shown["MainPID"]))
    if shown.get("Result") not in (None, "", "success"):
        facts.append(Fact("Last result", shown["Result"]))
    if shown.get("UnitFileState"):
        facts.append(Fact("Enabled", shown["UnitFileState"]))
    if shown.get("Description"):
        facts.append(Fact("Description", shown["Description"]))
    return TargetState(blank.kind, blank.name, active, tuple(facts))


READER = Reader(KIND, name, state)
