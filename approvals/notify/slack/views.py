"""Slack's requests: button clicks and modal submissions, and the ``/airlock`` command.

Every request must carry Slack's signature (HMAC-SHA256 of ``v0:{timestamp}:{body}``
with the app's signing secret) and a timestamp within five minutes, else 401
and nothing happens. Slack wants an answer within 3 s: a decision is made at
once (``services.decide`` is fast); updating the posted messages and any
ephemeral answer happen in the background.
"""

from __future__ import annotations

import json
import logging
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from slack_sdk.errors import SlackClientError
from slack_sdk.signature import SignatureVerifier

from accounts.stepup import Authentication
from approvals.choices import DecisionKind
from approvals.core import services
from approvals.notify.slack import REPLY_TASK, client, linking
from approvals.notify.slack.messages import APPROVE, REJECT, reject_modal
from infrastructure.enqueue import enqueue
from infrastructure.rest.errors import json_error

log = logging.getLogger(__name__)
SLACK = Authentication(via="slack")  # a button carries no second factor

STALE_SECONDS = 5 * 60


class BadPayload(Exception):
    """A signed request whose content is not what Slack sends."""


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None for a request Slack signed in the last five minutes; the error response otherwise."""
    secret = settings.SLACK_SIGNING_SECRET
    if not secret:
        return json_error(503, "not_configured", "Slack is not configured (SLACK_SIGNING_SECRET)")
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not (timestamp.isascii() and timestamp.isdigit()):
        return json_error(401, "invalid_signature", "no X-Slack-Request-Timestamp")
    try:
        body = request.body.decode("utf-8")
    except UnicodeDecodeError:
        return json_error(401, "invalid_signature", "the body is not UTF-8")
    if abs(time.time() - int(timestamp)) > STALE_SECONDS:
        return json_error(
            401, "invalid_signature", "the request is more than 5 minutes old (a replay?)"
        )
    if not SignatureVerifier(secret).is_valid(body, timestamp, signature):
        return json_error(401, "invalid_signature", "the signature does not match")
    return None


@csrf_exempt
@require_POST
def interactivity(request: HttpRequest) -> HttpResponse:
    """Slack's Interactivity Request URL: Approve / Reject clicks and the reject modal."""
    if refused := _refusal(request):
        return refused
    try:
        payload = json.loads(request.POST.get("payload", ""))
        if not isinstance(payload, dict):
            raise BadPayload("the payload is not an object")
        if payload.get("type") == "block_actions":
            return _clicked(payload)
        if payload.get("type") == "view_submission":
            return _submitted(payload)
    except (ValueError, BadPayload) as exc:
        return json_error(400, "parse_error", f"not a Slack interaction payload: {exc}")
    return HttpResponse(status=200)  # other interactions: nothing to do


@csrf_exempt
@require_POST
def command(request: HttpRequest) -> HttpResponse:
    """Slack's slash command Request URL: ``/airlock link CODE``, ``/airlock unlink``."""
    if refused := _refusal(request):
        return refused
    answer = linking.command(
        request.POST.get("team_id", ""),
        request.POST.get("user_id", ""),
        request.POST.get("text", ""),
    )
    return JsonResponse({"response_type": "ephemeral", "text": answer})


def _dig(data: object, *path: str) -> object:
    """What is found along ``path`` through nested objects, or None."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _text(data: dict, *path: str) -> str:
    """A string found along ``path``, or ``BadPayload``."""
    value = _dig(data, *path)
    if not isinstance(value, str):
        raise BadPayload(f"no {'.'.join(path)}")
    return value


def _proposal_id(value: object) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise BadPayload("no proposal id")


def _person(payload: dict):
    team = _dig(payload, "team", "id")
    return linking.reviewer_for(team if isinstance(team, str) else "", _text(payload, "user", "id"))


def _clicked(payload: dict) -> HttpResponse:
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise BadPayload("no actions")
    action_id = actions[0].get("action_id")
    if action_id not in (APPROVE, REJECT):
        return HttpResponse(status=200)
    proposal_id = _proposal_id(actions[0].get("value"))
    response_url = _dig(payload, "response_url")
    response_url = response_url if isinstance(response_url, str) else ""
    person = _person(payload)
    if person is None:
        _answer_later(response_url, linking.how_to_link())
    elif action_id == APPROVE:
        try:
            services.decide(proposal_id, person, DecisionKind.APPROVE, authentication=SLACK)
        except services.ProposalError as exc:
            _answer_later(response_url, _said(exc))
    else:
        _ask_for_a_comment(payload, proposal_id, response_url)
    return HttpResponse(status=200)


def _ask_for_a_comment(payload: dict, proposal_id: int, response_url: str) -> None:
    trigger = _text(payload, "trigger_id")
    try:  # at once: the trigger is good for 3 s
        client().views_open(trigger_id=trigger, view=reject_modal(proposal_id))
    except (SlackClientError, OSError) as exc:
        log.warning("could not open the reject modal: %s", exc)
        _answer_later(response_url, "Airlock could not open the reject form; try the console.")


def _submitted(payload: dict) -> HttpResponse:
    view = payload.get("view")
    if not isinstance(view, dict) or view.get("callback_id") != REJECT:
        return HttpResponse(status=200)
    try:
        metadata = json.loads(_text(view, "private_metadata"))
    except ValueError:
        raise BadPayload("private_metadata is not JSON") from None
    proposal_id = _proposal_id(_dig(metadata, "proposal"))
    comment = _dig(view, "state", "values", "comment", "comment", "value")
    person = _person(payload)
    if person is None:
        return _field_error(linking.how_to_link())
    try:
        services.decide(
            proposal_id,
            person,
            DecisionKind.REJECT,
            comment[:4000] if isinstance(comment, str) else "",
            authentication=SLACK,
        )
    except services.ProposalError as exc:
        if exc.url:
            return _field_error("It needs a fresh second factor: decide it in the console.")
        return _field_error(exc.message)
    return HttpResponse(status=200)  # an empty answer closes the modal


def _said(exc: services.ProposalError) -> str:
    """A refusal as Slack shows it, with the console's page that completes it, if any."""
    return f"{exc.message}: {exc.url}" if exc.url else exc.message


def _field_error(message: str) -> JsonResponse:
    return JsonResponse({"response_action": "errors", "errors": {"comment": message[:150]}})


def _answer_later(response_url: str, text: str) -> None:
    if not response_url:
        return
    try:
        enqueue(REPLY_TASK, response_url, text)
    except Exception:
        log.exception("could not enqueue a Slack answer")
