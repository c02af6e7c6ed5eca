"""The Slack message for a proposal, in Block Kit, rendered from the proposal as it is now.

One function renders every state (waiting with buttons, decided, expired, run),
so a message updated in place always says what the console says.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.urls import reverse

from approvals.choices import DecisionKind, ProposalStatus, risk_band
from approvals.models import Proposal
from approvals.notify.base import proposal_url
from approvals.policy.risk import top_reasons
from executions.actions import target_text

APPROVE = "airlock_approve"
REJECT = "airlock_reject"
ACTIONS_BLOCK = "airlock_review"
CODE_LINES = 20
CODE_CHARS = 1800
REASONS = 6
ZERO_WIDTH_FENCE = "`\u200b``"
STATUS = {
    ProposalStatus.APPROVED: "Approved :white_check_mark:",
    ProposalStatus.REJECTED: "Rejected :x:",
    ProposalStatus.EXPIRED: "Expired :hourglass: nobody decided in time",
    ProposalStatus.DENIED: "Denied by policy",
    ProposalStatus.WITHDRAWN: "Withdrawn by the agent :leftwards_arrow_with_hook: nothing will run",
}


def load(proposal_id: int) -> Proposal:
    """The proposal with what its message shows, in a fixed number of queries."""
    return (
        Proposal.objects.select_related("agent", "execution")
        .prefetch_related("decisions__reviewer")
        .get(pk=proposal_id)
    )


def escape(text: str) -> str:
    """Slack's mrkdwn treats these three as markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(proposal: Proposal, reviewable: bool) -> dict:
    """``{"text", "blocks"}`` for chat.postMessage and chat.update."""
    blocks = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": f"#{proposal.pk} {proposal.action}"[:150]},
        },
        _section(_about(proposal)),
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Risk*\n{_risk(proposal)}"},
                {"type": "mrkdwn", "text": f"*Status*\n{_status(proposal)}"},
            ],
        },
    ]
    if top_reasons(proposal.action, proposal.risk_reasons):
        blocks.append(_section("*Why this score*\n" + _reasons(proposal)))
    blocks.append(_section(_code(proposal)))
    if decisions := _decisions(proposal):
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": decisions}]})
    if proposal.execution_id:
        blocks.append(_section(_execution(proposal)))
    if reviewable and proposal.is_pending:
        blocks.append(_buttons(proposal))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _footer(proposal)}]})
    return {"text": fallback(proposal), "blocks": blocks}


def fallback(proposal: Proposal) -> str:
    """The notification text (and what clients without blocks show)."""
    state = "waits for review" if proposal.is_pending else proposal.status
    return f"Proposal #{proposal.pk} {proposal.action} by {proposal.agent.name} {state} (risk {proposal.risk_score})"


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def _about(proposal: Proposal) -> str:
    lines = [
        f"*{escape(proposal.summary or proposal.action)}*",
        f"Agent *{escape(proposal.agent.name)}* · urgency {proposal.urgency}",
    ]
    if target := target_text(proposal.action, proposal.parameters):
        lines.insert(1, f"On {escape(target)}")
    if proposal.reason:
        lines.append("> " + escape(proposal.reason[:500]).replace("\n", "\n> "))
    return "\n".join(lines)


def _risk(proposal: Proposal) -> str:
    return f"{proposal.risk_score} ({risk_band(proposal.risk_score)})"


def _status(proposal: Proposal) -> str:
    if not proposal.is_pending:
        return STATUS.get(proposal.status, proposal.status)
    needed = proposal.required_approvals
    text = f"Waiting: {proposal.approvals_remaining} of {needed} approval{'s' if needed != 1 else ''} still needed"
    if proposal.expiry_warned_at:
        text += "\n:warning: expires soon"
    return text


def _reasons(proposal: Proposal) -> str:
    """The strongest reasons first, but not the action's base risk (every one of the action
    has it)."""
    telling = top_reasons(proposal.action, proposal.risk_reasons, count=len(proposal.risk_reasons))
    shown = [f"• {escape(reason[:200])}" for reason in telling[:REASONS]]
    more = len(telling) - REASONS
    if more > 0:
        shown.append(f"_and {more} more_")
    return "\n".join(shown)


def _code(proposal: Proposal) -> str:
    parameters = proposal.parameters
    source = parameters.get("code") or parameters.get("command")
    if not isinstance(source, str):
        source = json.dumps(parameters, indent=2, sort_keys=True)
    lines = source.splitlines() or [""]
    shown = "\n".join(lines[:CODE_LINES])[:CODE_CHARS]
    label = f"*Code* ({parameters['language']})" if "language" in parameters else "*Parameters*"
    # A fence inside the code would end the block early.
    body = escape(shown).replace("```", ZERO_WIDTH_FENCE)
    text = f"{label}\n```{body}```"
    if shown != source:
        hidden = max(len(lines) - CODE_LINES, 0)
        more = f"{hidden} more lines" if hidden else "the rest"
        text += f"\n_Trimmed: {more} in <{proposal_url(proposal.pk)}|the full view>_"
    return text


def _decisions(proposal: Proposal) -> str:
    parts = []
    for decision in proposal.decisions.all():
        who = escape(decision.reviewer.get_username())
        if decision.kind == DecisionKind.APPROVE:
            parts.append(f":white_check_mark: *{who}* approved")
        else:
            comment = f": “{escape(decision.comment[:300])}”" if decision.comment else ""
            parts.append(f":x: *{who}* rejected{comment}")
    return " · ".join(parts)


def _execution(proposal: Proposal) -> str:
    execution = proposal.execution
    url = settings.SITE_URL + reverse("console:execution", args=[execution.pk])
    text = f"*Execution #{execution.pk}*: {execution.status}"
    if execution.is_terminal and execution.exit_code is not None:
        text += f", exit code {execution.exit_code}"
    return text + f" · <{url}|output>"


def _buttons(proposal: Proposal) -> dict:
    value = str(proposal.pk)
    return {
        "type": "actions",
        "block_id": ACTIONS_BLOCK,
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE,
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": value,
            },
            {
                "type": "button",
                "action_id": REJECT,
                "style": "danger",
                "text": {"type": "plain_text", "text": "Reject…"},
                "value": value,
            },
        ],
    }


def _footer(proposal: Proposal) -> str:
    text = f"<{proposal_url(proposal.pk)}|Open in Airlock>"
    if proposal.is_pending and proposal.expires_at:
        stamp = int(proposal.expires_at.timestamp())
        iso = proposal.expires_at.isoformat(timespec="minutes")
        text += f" · expires <!date^{stamp}^{{date_short_pretty}} at {{time}}|{iso}>"
    return text


def reject_modal(proposal_id: int) -> dict:
    """The modal Reject opens: a comment is asked for, and the decision made on submit."""
    return {
        "type": "modal",
        "callback_id": REJECT,
        "private_metadata": json.dumps({"proposal": proposal_id}),
        "title": {"type": "plain_text", "text": f"Reject #{proposal_id}"[:24]},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": "comment",
                "label": {"type": "plain_text", "text": "Why? The agent reads this."},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "comment",
                    "multiline": True,
                    "max_length": 3000,
                },
            }
        ],
    }
