"""Traces of a proposal, as an OTLP receiver collects them from a live ``serve``: one trace
from the agent's span through policy and risk, the review and its decision, the worker's
run in the sandbox (or the agent's report), across the web and worker processes. And
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` unset, nothing of tracing is loaded or kept."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import yaml

from tests.serving import ROOT, agent_token, manage, start_server, user_token
from tests.support import require

pytestmark = pytest.mark.any_database

try:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )
except ImportError:  # the tracing extra is not installed
    ExportTraceServiceRequest = ExportTraceServiceResponse = None

CODE = "print('traced')  # never in a span"


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str
    attributes: dict
    events: list[tuple[str, dict]] = field(default_factory=list)


def _value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(pairs) -> dict:
    return {pair.key: _value(pair.value) for pair in pairs}


def decoded(body: bytes) -> Iterator[Span]:
    """The spans of one OTLP/HTTP export (an ``ExportTraceServiceRequest``)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        service = _attributes(resource_spans.resource.attributes).get("service.name", "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield Span(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    name=span.name,
                    service=service,
                    attributes=_attributes(span.attributes),
                    events=[(event.name, _attributes(event.attributes)) for event in span.events],
                )


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver on a free local port: ``POST /v1/traces``, spans kept decoded."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Export)
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def of(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


class _Export(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        spans = list(decoded(body))
        with self.server.lock:
            self.server.spans += spans
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def receiver():
    require(ExportTraceServiceRequest is not None, "traces need airlock[tracing] installed")
    server = Receiver()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def deployment(receiver, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("traces") / "data"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    server = start_server(data_dir, extra_env=env)
    server.reviewer = user_token(data_dir, "reviewer")
    server.tools = agent_token(data_dir, "traced-bot", "tool.call:billing.*")
    _everything_to_review(data_dir)
    yield server
    server.stop()


def _everything_to_review(data_dir) -> None:
    """A policy under which every proposal waits for a reviewer (none approved at once)."""
    policy = yaml.safe_load(manage(data_dir, "policy", "export"))
    policy.update(auto_approve_below=0)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        yaml.safe_dump(policy, handle)
        handle.flush()
        manage(data_dir, "policy", "apply", handle.name, "--comment", "traces: review all")


def propose(server, body: dict, traceparent: str, token: str) -> dict:
    """POST /api/v1/proposals as an agent whose span is ``traceparent``."""
    request = urllib.request.Request(
        server.base + "/api/v1/proposals", method="POST", data=json.dumps(body).encode()
    )
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("traceparent", traceparent)
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        return json.loads(response.read())


def agents_span() -> tuple[str, str, str]:
    """(trace id, span id, traceparent) of a sampled span the agent is in."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def collected(receiver: Receiver, trace_id: str, names: set[str]) -> dict[str, Span]:
    """The trace's spans by name, once every one of ``names`` has arrived (each once)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        spans = receiver.of(trace_id)
        if names <= {span.name for span in spans}:
            time.sleep(0.5)  # anything else of the trace, sent in the same breath
            spans = receiver.of(trace_id)
            by_name = {span.name: span for span in spans}
            assert len(by_name) == len(spans), [span.name for span in spans]
            return by_name
        time.sleep(0.1)
    got = sorted(span.name for span in receiver.of(trace_id))
    raise AssertionError(f"spans of {names - set(got)} never arrived; got {got}")


def one_tree(spans: dict[str, Span], root: str) -> None:
    """Every span's parent is another span of the trace or ``root``, and each leads to it."""
    ids = {span.span_id: span for span in spans.values()}
    for span in spans.values():
        seen, at = set(), span
        while at.parent_id != root:
            assert at.parent_id in ids, f"{at.name}'s parent {at.parent_id} is not in the trace"
            assert at.span_id not in seen
            seen.add(at.span_id)
            at = ids[at.parent_id]


def test_an_approved_script_is_one_trace_from_the_agents_span_to_the_sandbox(deployment, receiver):
    trace_id, agent_span, traceparent = agents_span()
    parameters = {"language": "python", "code": CODE, "timeout_seconds": 30}
    proposal = propose(
        deployment,
        {"action": "script.execute", "parameters": parameters, "reason": "traced"},
        traceparent,
        deployment.token,
    )
    assert proposal["status"] == "pending"
    status, _ = deployment.api(
        "POST", f"/api/v1/proposals/{proposal['id']}/approve", {"comment": "ok"},
        token=deployment.reviewer,
    )  # fmt: skip
    assert status == 200
    _, finished = deployment.api(
        "GET", f"/api/v1/proposals/{proposal['id']}?wait=30&until=finished"
    )
    assert finished["execution_status"] == "succeeded"

    names = {"POST /api/v1/proposals", "proposal.submit", "proposal.risk", "proposal.policy",
             "proposal.review", "execution.run", "sandbox.run"}  # fmt: skip
    spans = collected(receiver, trace_id, names)
    assert names <= set(spans)
    assert spans["POST /api/v1/proposals"].parent_id == agent_span
    one_tree(spans, agent_span)
    submit, run = spans["proposal.submit"], spans["execution.run"]
    # Later spans start from the context kept with the proposal, in whichever process.
    for later in ("proposal.review", "execution.run"):
        assert spans[later].parent_id == submit.span_id
    assert spans["sandbox.run"].parent_id == run.span_id
    assert {spans[name].service for name in ("proposal.submit", "proposal.review")} == {
        "airlock-web"
    }
    assert {run.service, spans["sandbox.run"].service} == {"airlock-worker"}

    pk, execution = proposal["id"], finished["execution_id"]
    assert submit.attributes["airlock.proposal_id"] == pk
    assert submit.attributes["airlock.action"] == "script.execute"
    assert submit.attributes["airlock.agent"] == "demo-agent"
    assert spans["proposal.policy"].attributes["airlock.status"] == "pending"
    review = spans["proposal.review"]
    assert review.attributes["airlock.status"] == "approved"
    assert review.events == [
        ("decision", {"airlock.decision": "approved", "airlock.reviewer": "reviewer"})
    ]
    assert run.attributes["airlock.execution_id"] == execution
    assert run.attributes["airlock.status"] == "succeeded"
    assert spans["sandbox.run"].attributes["airlock.backend"] == "local"
    # Ids, names and states; never the code, nor what it printed.
    shown = json.dumps([span.attributes for span in spans.values()])
    assert "traced')" not in shown and "never in a span" not in shown


def test_a_tool_calls_report_joins_its_proposals_trace(deployment, receiver):
    trace_id, agent_span, traceparent = agents_span()
    call = {"tool": "billing.refund", "arguments": {"customer": "cus_1", "amount": 3}}
    proposal = propose(
        deployment, {"action": "tool.call", "parameters": call}, traceparent, deployment.tools
    )
    status, approved = deployment.api(
        "POST", f"/api/v1/proposals/{proposal['id']}/approve", {}, token=deployment.reviewer
    )
    assert status == 200 and approved["status"] == "approved"
    status, _ = deployment.api(
        "POST", f"/api/v1/executions/{approved['execution_id']}/report",
        {"status": "succeeded", "output": {"refund_id": "re_1"}}, token=deployment.tools,
    )  # fmt: skip
    assert status == 200

    names = {"POST /api/v1/proposals", "proposal.submit", "proposal.review", "execution.report"}
    spans = collected(receiver, trace_id, names)
    one_tree(spans, agent_span)
    report = spans["execution.report"]
    assert report.parent_id == spans["proposal.submit"].span_id
    assert report.attributes["airlock.status"] == "succeeded"
    assert report.attributes["airlock.execution_id"] == approved["execution_id"]
    assert "cus_1" not in json.dumps([span.attributes for span in spans.values()])


def test_an_agents_traceparent_that_is_not_valid_starts_a_trace_of_airlocks(deployment, receiver):
    parameters = {"language": "python", "code": "print(1)"}
    proposal = propose(
        deployment,
        {"action": "script.execute", "parameters": parameters},
        "00-zz",
        deployment.token,
    )

    def made():
        return [
            span
            for span in list(receiver.spans)
            if span.name == "proposal.submit"
            and span.attributes.get("airlock.proposal_id") == proposal["id"]
        ]

    deadline = time.monotonic() + 30
    while not made() and time.monotonic() < deadline:
        time.sleep(0.1)
    (submit,) = made()
    (request,) = [
        span for span in receiver.of(submit.trace_id) if span.name == "POST /api/v1/proposals"
    ]
    assert request.parent_id == ""  # a root: a new trace


def test_the_python_sdk_sends_the_current_spans_traceparent():
    require(ExportTraceServiceRequest is not None, "traces need airlock[tracing] installed")
    import airlock_sdk
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    heard = []

    class Stub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            heard.append(self.headers.get("traceparent"))
            body = json.dumps({"id": 7, "status": "succeeded", "stdout": "", "stderr": ""})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    trace_id, span_id, traceparent = agents_span()
    context = SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )  # fmt: skip
    try:
        with airlock_sdk.Airlock(f"http://127.0.0.1:{stub.server_address[1]}", "alk_x") as airlock:
            with trace.use_span(NonRecordingSpan(context)):
                airlock.result(7)
            airlock.result(7)  # no span current: no header
    finally:
        stub.shutdown()
    assert heard == [traceparent, None]


UNSET = """
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from approvals.core import services
from approvals.core.tokens import create_agent
agent, _ = create_agent("quiet-bot", ["script.execute"])
made = services.submit(agent, {"action": "script.execute",
                               "parameters": {"language": "python", "code": "print(1)"}})
loaded = [name for name in sys.modules if name.startswith(
    ("opentelemetry.sdk.trace", "opentelemetry.exporter", "infrastructure.tracing.otel"))]
print(json.dumps({"trace_parent": made.proposal.trace_parent, "loaded": sorted(loaded)}))
"""


def test_with_no_endpoint_nothing_of_tracing_is_loaded_or_kept(tmp_path):
    """(redis-py imports the SDK's metrics part whenever the SDK is installed: that part is
    not Airlock's; its tracer, its exporter and ``infrastructure.tracing.otel`` are.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(AIRLOCK_DATA_DIR=str(tmp_path / "data"), DJANGO_SETTINGS_MODULE="console.settings")
    done = subprocess.run(
        [sys.executable, "-c", UNSET], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"trace_parent": None, "loaded": []}
