"""What may pass the gate: the calls Airlock makes, and to which containers.

``plan`` reads one request (method, path, query, body) and says what it is: a
call that names no container (the engine's ping and version, the sandbox image,
the list of sandbox containers, a network prune that spares sandbox networks, a
sandbox create), or an operation on one container. An operation is then judged
against what that container is (``judge``), from the engine's own view of it:

| operation | a sandbox container | a target (``DOCKER_ACTION_CONTAINERS``) |
|---|---|---|
| inspect, start | yes | yes |
| stop, restart, logs | no | yes |
| attach, wait, kill, remove | yes, by the worker that made it | no |

An MCP server's container (the gateway's upstream run from an image, checked
by ``creates``) is a sandbox here too.

A create is labelled with the address it came from (``airlock.gate.peer``), and
only that address may attach to, start, wait for, kill or remove the sandbox: a
worker cannot reach into another worker's runs. An MCP server's create that
joins a network (``container:NAME``) may join only a running relay of the same
client's (``join``).

Anything else — ``exec``, ``/info``, images other than the sandbox's, volumes,
swarm, plugins, a build, a body on any call but create — is refused with 403
and a message that says why. The request sent on is written out again from
what was checked (canonical path, the known query keys, the checked body).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

from .creates import RELAY_LABEL, Policy, Refused, check_create, joined
from .targets import SANDBOX_LABEL, Targets

VERSION_PREFIX = re.compile(r"\A/v[0-9]+\.[0-9]+(?=/)")
CONTAINER_PATH = re.compile(r"\A/containers/([A-Za-z0-9][A-Za-z0-9_.-]{0,127})(?:/([a-z]+))?\Z")
SAFE_PATH = re.compile(r"\A[A-Za-z0-9_.:/-]*\Z")
MAX_BODY = 1024 * 1024

SANDBOX, TARGET = "sandbox", "target"
# (method, operation) → who it may touch, and the query keys it may carry.
CONTAINER_OPS: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {
    ("GET", "json"): (frozenset({SANDBOX, TARGET}), frozenset({"size"})),
    ("POST", "start"): (frozenset({SANDBOX, TARGET}), frozenset()),
    ("POST", "stop"): (frozenset({TARGET}), frozenset({"t", "signal"})),
    ("POST", "restart"): (frozenset({TARGET}), frozenset({"t", "signal"})),
    ("GET", "logs"): (
        frozenset({TARGET}),
        frozenset({"stdout", "stderr", "timestamps", "follow", "tail", "since", "until"}),
    ),
    ("POST", "attach"): (
        frozenset({SANDBOX}),
        frozenset({"stdin", "stdout", "stderr", "stream", "logs"}),
    ),
    ("POST", "wait"): (frozenset({SANDBOX}), frozenset({"condition"})),
    ("POST", "kill"): (frozenset({SANDBOX}), frozenset({"signal"})),
    ("DELETE", ""): (frozenset({SANDBOX}), frozenset({"force", "v", "link"})),
}
OPERATION_NAMES = {"json": "inspect", "": "remove"}
PEER_LABEL = "airlock.gate.peer"
CREATOR_ONLY = frozenset({"attach", "start", "wait", "kill", ""})


class Denied(Exception):
    """The gate refuses the request; the message is the answer's."""


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # the request line's path and query, as sent
    body: bytes = b""
    peer: str = ""  # the client's address


@dataclass
class Plan:
    """What to send on, and what to know first."""

    method: str
    path: str
    query: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    container: str = ""  # an operation on this container: judge it first
    operation: str = ""
    tunnel: bool = False  # attach: the connection becomes the container's stream
    joins: str = ""  # a create in this container's network: ``join`` it first

    @property
    def target(self) -> str:
        return self.path + ("?" + urlencode(self.query) if self.query else "")


def _split(target: str) -> tuple[str, list[tuple[str, str]]]:
    path, _, query = target.partition("?")
    path = VERSION_PREFIX.sub("", path, count=1)
    if not SAFE_PATH.match(path) or ".." in path or "//" in path:
        raise Denied(f"the path {path[:200]!r} is not one Airlock calls")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise Denied(f"the query does not parse: {exc}") from exc
    return path, pairs


def _only(query: list[tuple[str, str]], allowed: frozenset[str], what: str) -> None:
    extra = sorted({key for key, _ in query} - allowed)
    if extra:
        raise Denied(f"{what} does not take {', '.join(extra)}")


def _with_label(query: list[tuple[str, str]], key: str) -> list[tuple[str, str]]:
    """The query with ``filters`` made to include ``{key: [airlock.sandbox]}``."""
    filters: dict = {}
    rest = []
    for name, value in query:
        if name != "filters":
            rest.append((name, value))
            continue
        try:
            filters = json.loads(value) if value else {}
        except ValueError as exc:
            raise Denied("filters must be JSON") from exc
        if not isinstance(filters, dict):
            raise Denied("filters must be a JSON object")
    wanted = filters.get(key) or []
    if isinstance(wanted, dict):
        wanted = [name for name, on in wanted.items() if on]
    if not isinstance(wanted, list):
        raise Denied(f"filters.{key} must be a list")
    filters[key] = sorted({*map(str, wanted), SANDBOX_LABEL})
    return [*rest, ("filters", json.dumps(filters))]


def plan(request: Request, policy: Policy) -> Plan:
    """What ``request`` is, or ``Denied``."""
    path, query = _split(request.target)
    planned = _route(request, policy, path, query)
    if request.body and not planned.body:
        raise Denied(f"{request.method} {path} takes no body")
    return planned


def _route(request: Request, policy: Policy, path: str, query: list[tuple[str, str]]) -> Plan:
    method = request.method
    if method in ("GET", "HEAD") and path in ("/_ping", "/version"):
        return Plan(method, path)
    if method == "GET" and path == f"/images/{policy.image}/json":
        return Plan(method, path)
    if method == "GET" and path == "/containers/json":
        _only(
            query,
            frozenset({"all", "filters", "limit", "size", "trunc_cmd", "since", "before"}),
            "listing containers",
        )
        return Plan(method, path, _with_label(query, "label"))
    if method == "POST" and path == "/networks/prune":
        _only(query, frozenset({"filters"}), "pruning networks")
        return Plan(method, path, _with_label(query, "label!"))
    if method == "POST" and path == "/containers/create":
        _only(query, frozenset(), "a sandbox create")
        try:
            checked = check_create(json.loads(request.body or b"null"), policy)
        except ValueError as exc:
            raise Denied(f"the create's body is not JSON: {exc}") from exc
        except Refused as exc:
            raise Denied(f"not a sandbox container: {exc}") from exc
        checked["Labels"][PEER_LABEL] = request.peer  # whatever the worker said
        return Plan(method, path, body=json.dumps(checked).encode(), joins=joined(checked))
    match = CONTAINER_PATH.match(path)
    if match:
        operation = match.group(2) or ""
        rule = CONTAINER_OPS.get((method, operation))
        if rule is None:
            raise Denied(
                f"{method} {path}: Airlock does not {operation or method.lower()} containers"
            )
        _only(query, rule[1], OPERATION_NAMES.get(operation, operation))
        if any(key == "link" and value.lower() not in ("0", "false") for key, value in query):
            raise Denied("removing a link is not a call Airlock makes")
        return Plan(
            method, path, query, container=match.group(1), operation=operation,
            tunnel=operation == "attach",
        )  # fmt: skip
    raise Denied(f"{method} {path} is not a call Airlock makes")


def judge(planned: Plan, container: dict | None, targets: Targets, peer: str = "") -> Plan:
    """``planned`` sent to the container's id, if the container may take that operation
    from ``peer`` (the client's address)."""
    name = planned.container
    if container is None:
        raise LookupError(name)
    labels = (container.get("Config") or {}).get("Labels") or {}
    kind = SANDBOX if labels.get(SANDBOX_LABEL) == "1" else TARGET
    allowed = CONTAINER_OPS[(planned.method, planned.operation)][0]
    operation = OPERATION_NAMES.get(planned.operation, planned.operation)
    if kind == TARGET and not targets.allows(container.get("Name", ""), labels):
        raise Denied(
            f"container {name} is not one Airlock may act on: it allows {targets.describe()}"
        )
    if kind not in allowed:
        what = "an Airlock sandbox" if kind == SANDBOX else "not an Airlock sandbox"
        raise Denied(f"{operation} of container {name} refused: it is {what}")
    if kind == SANDBOX and planned.operation in CREATOR_ONLY and labels.get(PEER_LABEL) != peer:
        raise Denied(f"{operation} of sandbox {name} refused: another client started it")
    cid = container["Id"]
    suffix = f"/{planned.operation}" if planned.operation else ""
    planned.path = f"/containers/{cid}{suffix}"
    planned.container = cid
    return planned


def join(planned: Plan, container: dict | None, peer: str) -> Plan:
    """``planned`` (a server's create in the network of ``planned.joins``) with that
    network named by id, if the container is a running relay that ``peer`` made."""
    name = planned.joins
    if container is None:
        raise Denied(f"the relay {name} whose network the server joins does not exist")
    labels = (container.get("Config") or {}).get("Labels") or {}
    if labels.get(RELAY_LABEL) != "1" or labels.get(SANDBOX_LABEL) != "1":
        raise Denied(f"container {name} is not a relay: a server may join only its relay's network")
    if labels.get(PEER_LABEL) != peer:
        raise Denied(f"the relay {name} was made by another client")
    if (container.get("HostConfig") or {}).get("NetworkMode") != "none":
        raise Denied(f"the relay {name} has a network of the engine's: it may not be joined")
    if not (container.get("State") or {}).get("Running"):
        raise Denied(f"the relay {name} is not running")
    body = json.loads(planned.body)
    body["HostConfig"]["NetworkMode"] = f"container:{container['Id']}"
    planned.body = json.dumps(body).encode()
    return planned
