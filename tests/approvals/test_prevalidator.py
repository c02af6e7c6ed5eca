"""The LLM pre-validator against a real HTTP server the test starts on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from approvals.policy.prevalidators import (
    MODIFYING_FLOOR,
    OpenAIChatPreValidator,
    PreValidation,
    get_prevalidator,
    parse_answer,
    prevalidate,
)
from approvals.policy.risk import RiskAssessment

LOW_RISK = RiskAssessment(score=2, reasons=[])
ACTION = "host.exec"
PARAMETERS = {"command": "cat /var/log/syslog"}


class FakeModel:
    """What the fake endpoint answers, and what it was asked."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = b""
        self.delay = 0.0
        self.requests: list[dict] = []

    def answer(self, content: str) -> None:
        self.body = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": content}}]}
        ).encode()

    def verdict(self, score: object, reason: str = "reads a log file") -> None:
        self.answer(json.dumps({"score": score, "reason": reason}))


def _handler(model: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            model.requests.append(
                {
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "json": json.loads(self.rfile.read(length)),
                }
            )
            time.sleep(model.delay)
            try:
                self.send_response(model.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(model.body)))
                self.end_headers()
                self.wfile.write(model.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting, as the slow-server test intends

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def model() -> Iterator[FakeModel]:
    fake = FakeModel()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.block_on_close = False
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"  # type: ignore[attr-defined]
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def configured(settings, model):
    settings.PREVALIDATOR_URL = model.url
    settings.PREVALIDATOR_MODEL = "tiny-judge"
    settings.PREVALIDATOR_API_KEY = "sk-test"
    settings.PREVALIDATOR_TIMEOUT_SECONDS = 1
    return model


def test_it_returns_the_models_score_and_reason(configured):
    configured.verdict(2)
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True)
    assert result == PreValidation(score=2, reason="reads a log file", ok=True)


def test_it_asks_the_chat_completions_endpoint_for_json_only(configured):
    configured.verdict(2)
    prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True)
    (request,) = configured.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["authorization"] == "Bearer sk-test"
    assert request["json"]["model"] == "tiny-judge"
    system, user = request["json"]["messages"]
    assert system["role"] == "system" and "single JSON object" in system["content"]
    assert "cat /var/log/syslog" in user["content"]


def test_a_low_score_for_a_modifying_command_is_raised_to_six(configured):
    configured.verdict(1, "looks harmless")
    result = prevalidate(ACTION, {"command": "systemctl restart nginx"}, LOW_RISK, read_only=False)
    assert result.ok
    assert result.score == MODIFYING_FLOOR == 6
    assert "raised from 1 to 6" in result.reason


def test_a_low_score_is_raised_when_the_static_analysis_already_says_six(configured):
    configured.verdict(0)
    risky = RiskAssessment(score=8, reasons=["deletes files (rm)"])
    assert prevalidate(ACTION, PARAMETERS, risky, read_only=True).score == 6


def test_a_high_score_for_a_modifying_command_is_kept(configured):
    configured.verdict(9, "destroys data")
    assert prevalidate(ACTION, {"command": "rm -rf /srv"}, LOW_RISK).score == 9


def test_a_slow_model_times_out_and_sends_the_proposal_to_a_person(settings, configured):
    settings.PREVALIDATOR_TIMEOUT_SECONDS = 0.3
    configured.delay = 2
    configured.verdict(1)
    started = time.monotonic()
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True)
    assert time.monotonic() - started < 1.5
    assert result.ok is False and result.score is None
    assert "did not answer within 0.3 s" in result.reason


def test_a_server_error_sends_the_proposal_to_a_person(configured):
    configured.status = 500
    configured.body = b'{"error": "overloaded"}'
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True)
    assert result.ok is False and result.score is None
    assert "HTTP 500" in result.reason


@pytest.mark.parametrize(
    "content",
    [
        "Score: 2",
        '```json\n{"score": 2, "reason": "x"}\n```',
        '{"score": 2}',
        '{"score": "2", "reason": "x"}',
        '{"score": 2.5, "reason": "x"}',
        '{"score": true, "reason": "x"}',
        '[2, "x"]',
    ],
)
def test_an_answer_that_is_not_the_json_asked_for_sends_the_proposal_to_a_person(
    configured, content
):
    configured.answer(content)
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True)
    assert result.ok is False and result.score is None
    assert "unusable" in result.reason


def test_a_body_that_is_not_json_at_all_sends_the_proposal_to_a_person(configured):
    configured.body = b"<html>gateway</html>"
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True)
    assert result.ok is False
    assert "not a chat-completions response" in result.reason


@pytest.mark.parametrize("score", [-1, 11, 100])
def test_a_score_out_of_range_sends_the_proposal_to_a_person(configured, score):
    configured.verdict(score)
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True)
    assert result.ok is False
    assert "outside 0-10" in result.reason


def test_an_unreachable_server_sends_the_proposal_to_a_person(settings):
    settings.PREVALIDATOR_URL = "http://127.0.0.1:9/v1"
    settings.PREVALIDATOR_MODEL = "tiny-judge"
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK)
    assert result.ok is False
    assert "failed" in result.reason


@pytest.mark.parametrize("missing", ["PREVALIDATOR_URL", "PREVALIDATOR_MODEL"])
def test_without_configuration_there_is_no_prevalidator(settings, missing):
    settings.PREVALIDATOR_URL = "http://127.0.0.1:9/v1"
    settings.PREVALIDATOR_MODEL = "tiny-judge"
    delattr(settings, missing)
    assert get_prevalidator() is None
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK)
    assert result == PreValidation(score=None, reason="no pre-validator is configured", ok=False)


def test_a_validator_built_without_a_url_says_it_is_not_configured():
    result = OpenAIChatPreValidator(url="", model="").validate(ACTION, PARAMETERS, LOW_RISK)
    assert result == PreValidation(score=None, reason="no pre-validator is configured", ok=False)


def test_the_full_endpoint_url_is_accepted_as_is(configured, settings):
    settings.PREVALIDATOR_URL = configured.url + "/chat/completions"
    configured.verdict(3)
    assert prevalidate(ACTION, PARAMETERS, LOW_RISK, read_only=True).score == 3
    assert configured.requests[0]["path"] == "/v1/chat/completions"


def test_the_validator_class_is_pluggable(settings):
    settings.PREVALIDATOR_CLASS = f"{__name__}.StubValidator"
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK)
    assert result == PreValidation(score=4, reason="stub", ok=True)


def test_a_validator_that_raises_sends_the_proposal_to_a_person(settings):
    settings.PREVALIDATOR_CLASS = f"{__name__}.RaisingValidator"
    result = prevalidate(ACTION, PARAMETERS, LOW_RISK)
    assert result.ok is False and "RuntimeError" in result.reason


def test_a_proposal_too_large_for_the_prompt_goes_to_a_person(configured):
    configured.verdict(0)
    huge = {"language": "python", "code": "x = 1\n" * 10_000}
    result = prevalidate("script.execute", huge, LOW_RISK)
    assert result == PreValidation(None, "the proposal is too large to pre-validate", ok=False)
    assert configured.requests == []


def test_parse_answer_accepts_exactly_a_score_and_a_reason():
    body = json.dumps({"choices": [{"message": {"content": '{"score": 7, "reason": " risky "}'}}]})
    assert parse_answer(body) == (7, "risky")


class StubValidator(OpenAIChatPreValidator):
    @classmethod
    def from_settings(cls):
        return cls(url="http://unused", model="stub")

    def validate(self, action, parameters, assessment, read_only=False):
        return PreValidation(score=4, reason="stub", ok=True)


class RaisingValidator(StubValidator):
    def validate(self, action, parameters, assessment, read_only=False):
        raise RuntimeError("boom")
