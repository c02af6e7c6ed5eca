"""``/ws/queue/``: htmx out-of-band fragments for the queue, the badge and a proposal's panel."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from approvals.core import services
from console.asgi import application

from .conftest import pending_proposal

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # The fragments are the subject here, not the embedded layer's polling.
    pytest.mark.usefixtures("in_memory_channel_layer", "consumer_connections_closed"),
]


async def connect(user, query: str = "") -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application,
        "/ws/queue/" + (f"?{query}" if query else ""),
        headers=[(b"origin", b"http://localhost")],
    )
    if user is not None:
        communicator.scope["user"] = user
    return communicator


async def receive_until(communicator, needle: str, timeout: float = 10) -> str:
    async with asyncio.timeout(timeout):
        while True:
            html = await communicator.receive_from(timeout=timeout)
            if needle in html:
                return html


async def test_a_reviewer_gets_a_snapshot_then_new_proposals_without_a_reload(reviewer, agent):
    first = await database_sync_to_async(pending_proposal)(agent, risk=5)
    communicator = await connect(reviewer)
    connected, _ = await communicator.connect()
    assert connected
    snapshot = await communicator.receive_from(timeout=5)
    assert 'id="pending-count"' in snapshot and 'hx-swap-oob="true"' in snapshot
    assert f'id="proposal-row-{first.pk}"' in snapshot

    proposal = await database_sync_to_async(services.submit)(
        agent,
        {
            "action": "script.execute",
            "parameters": {"language": "python", "code": "import os\nprint(os.listdir('.'))"},
        },
    )
    html = await receive_until(communicator, f'id="proposal-row-{proposal.proposal.pk}"')
    assert '<div id="queue-list" hx-swap-oob="true">' in html
    assert ">2</span>" in html  # the badge
    await communicator.disconnect()


async def test_a_decided_proposal_leaves_the_queue(reviewer, reviewer2, agent):
    proposal = await database_sync_to_async(pending_proposal)(agent)
    communicator = await connect(reviewer)
    await communicator.connect()
    await communicator.receive_from(timeout=5)
    await database_sync_to_async(services.decide)(proposal.pk, reviewer2, "reject", "no")
    html = await receive_until(communicator, "queue-list")
    assert f'proposal-row-{proposal.pk}"' not in html
    assert "Nothing waits for you." in html  # the "Needs me" view, the queue's first
    await communicator.disconnect()


async def test_the_tabs_counts_come_as_swaps_of_their_own_beside_the_list(reviewer, agent):
    communicator = await connect(reviewer)
    await communicator.connect()
    await communicator.receive_from(timeout=5)
    code = "import os\nprint(os.listdir('.'))"
    await database_sync_to_async(services.submit)(
        agent, {"action": "script.execute", "parameters": {"language": "python", "code": code}}
    )
    html = await receive_until(communicator, "proposal-row-")
    # htmx swaps only top-level out-of-band elements: the counts must not sit in the list
    counts = '<span class="count" id="mine-count" hx-swap-oob="true">1</span>'
    assert counts in html and html.index(counts) < html.index('<div id="queue-list"')
    assert '<span class="count" id="all-count" hx-swap-oob="true">1</span>' in html
    await communicator.disconnect()


async def test_a_page_without_a_live_view_gets_the_badge_alone(reviewer, agent):
    """Every other page's socket (``shell=1``): the count for the badge and the tab's title,
    and the notices; never a queue or a proposal rendered for nothing."""
    communicator = await connect(reviewer, "shell=1")
    await communicator.connect()
    snapshot = await communicator.receive_from(timeout=5)
    assert 'id="pending-count"' in snapshot and "queue-list" not in snapshot
    await database_sync_to_async(pending_proposal)(agent)
    from channels.layers import get_channel_layer

    await get_channel_layer().group_send("proposals", {"type": "proposal.changed"})
    html = await receive_until(communicator, "pending-count")
    assert ">1</span>" in html and "queue-list" not in html and "proposal-state" not in html
    await communicator.disconnect()


async def test_the_queue_fragment_keeps_the_page_filters(reviewer, agent):
    low = await database_sync_to_async(pending_proposal)(agent, risk=2)
    high = await database_sync_to_async(pending_proposal)(agent, risk=9, required=2)
    communicator = await connect(reviewer, "risk=high")
    await communicator.connect()
    html = await communicator.receive_from(timeout=5)
    assert f"proposal-row-{high.pk}" in html and f"proposal-row-{low.pk}" not in html
    await communicator.disconnect()


async def test_a_proposal_page_gets_its_panel_when_someone_else_decides(reviewer, reviewer2, agent):
    proposal = await database_sync_to_async(pending_proposal)(agent, risk=9, required=2)
    communicator = await connect(reviewer, f"proposal={proposal.pk}")
    await communicator.connect()
    snapshot = await communicator.receive_from(timeout=5)
    assert '<div id="proposal-state" hx-swap-oob="true">' in snapshot
    assert "decide-area" not in snapshot  # a comment being typed is never wiped
    await database_sync_to_async(services.decide)(proposal.pk, reviewer2, "approve", "lgtm")
    html = await receive_until(communicator, "lgtm")
    assert 'id="approvals-remaining">1<' in html
    await database_sync_to_async(services.decide)(proposal.pk, reviewer, "approve", "")
    html = await receive_until(communicator, "status-approved")
    assert '<div id="decide-area" hx-swap-oob="true">' in html
    assert 'id="execution-link"' in html
    await communicator.disconnect()


async def test_a_burst_of_changes_is_a_few_renders_that_end_up_to_date(reviewer, agent):
    from channels.layers import get_channel_layer

    communicator = await connect(reviewer)
    await communicator.connect()
    await communicator.receive_from(timeout=5)  # the snapshot: an empty queue
    layer = get_channel_layer()
    burst = []
    for _ in range(30):
        burst.append(await database_sync_to_async(pending_proposal)(agent))
        await layer.group_send(
            "proposals", {"type": "proposal.changed", "proposal_id": burst[-1].pk}
        )
    frames = []

    def up_to_date() -> bool:
        return bool(frames) and all(f"proposal-row-{p.pk}" in frames[-1] for p in burst)

    # Until a frame shows the whole burst (however slow the machine), then a second of quiet.
    while not up_to_date() or not await communicator.receive_nothing(timeout=1):
        frames.append(await communicator.receive_from(timeout=30))
    assert 1 <= len(frames) <= 3, len(frames)  # one render per change was 30
    await communicator.disconnect()


async def send_notice(proposal, agent, risk: int = 5) -> None:
    await send_notices([(proposal, risk)], agent)


async def send_notices(proposals: list[tuple], agent) -> None:
    """What ``ConsoleNotifier`` sends for one drained batch of (proposal, risk)."""
    from channels.layers import get_channel_layer

    events = [
        {
            "kind": "review_requested",
            "proposal_id": proposal.pk,
            "status": "pending",
            "action": "script.execute",
            "agent": agent.name,
            "summary": "x",
            "risk": risk,
            "url": "",
            "at": "",
        }
        for proposal, risk in proposals
    ]
    await get_channel_layer().group_send("proposals", {"type": "notifications", "events": events})


async def test_notifications_arrive_as_notices(reviewer, agent):
    proposal = await database_sync_to_async(pending_proposal)(agent)
    communicator = await connect(reviewer)
    await communicator.connect()
    await communicator.receive_from(timeout=5)
    await send_notice(proposal, agent)
    html = await receive_until(communicator, "notice")
    assert 'hx-swap-oob="afterbegin:#notices"' in html and "waits for review" in html
    await communicator.disconnect()


async def test_notices_follow_the_reviewers_preferences(reviewer, agent):
    from approvals.notify.models import ReviewerPreferences

    await database_sync_to_async(ReviewerPreferences.objects.create)(user=reviewer, bands=["high"])
    medium = await database_sync_to_async(pending_proposal)(agent, risk=5)
    high = await database_sync_to_async(pending_proposal)(agent, risk=8)
    communicator = await connect(reviewer)
    await communicator.connect()
    await communicator.receive_from(timeout=5)
    await send_notice(medium, agent, risk=5)  # not a band they asked for
    await send_notice(high, agent, risk=8)
    html = await receive_until(communicator, "notice")
    assert f"#{high.pk} script.execute" in html and f"#{medium.pk} " not in html
    await database_sync_to_async(ReviewerPreferences.objects.filter(user=reviewer).update)(
        console=False
    )
    await send_notice(high, agent, risk=8)
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()


async def test_a_drained_batch_is_one_frame_of_the_notices_wanted_in_order(
    reviewer, agent, settings, monkeypatch
):
    from django.db import transaction

    from approvals.core.outbox import notify
    from approvals.notify import outbox as notifications
    from approvals.notify.models import ReviewerPreferences

    settings.NOTIFIERS = ["approvals.notify.console.ConsoleNotifier"]
    monkeypatch.setattr(notifications, "request_drain", lambda: None)
    await database_sync_to_async(ReviewerPreferences.objects.create)(
        user=reviewer, bands=["medium", "high"]
    )
    risks = [8, 1, 5, 9]  # the 1 is in a band they did not ask for
    proposals = [await database_sync_to_async(pending_proposal)(agent, risk=r) for r in risks]
    communicator = await connect(reviewer)
    await communicator.connect()
    await communicator.receive_from(timeout=5)

    def notify_and_drain():
        with transaction.atomic():
            for proposal in proposals:
                notify("review_requested", proposal)
        return notifications.drain()

    assert await database_sync_to_async(notify_and_drain)() == 4
    html = await communicator.receive_from(timeout=5)
    shown = [p.pk for p in proposals if p.risk_score != 1]
    positions = [html.index(f"#{pk} script.execute") for pk in shown]
    assert positions == sorted(positions) and html.count('class="notice ') == 3
    assert f"#{proposals[1].pk} script.execute" not in html
    assert await communicator.receive_nothing(timeout=0.5)  # one frame for the batch
    await communicator.disconnect()


async def test_a_burst_of_notices_shows_the_newest_it_wants(reviewer, agent):
    from approvals.notify.models import ReviewerPreferences
    from approvals.review.consumers import NOTICES_PER_PUSH

    await database_sync_to_async(ReviewerPreferences.objects.create)(user=reviewer, bands=["high"])
    communicator = await connect(reviewer)
    await communicator.connect()
    await communicator.receive_from(timeout=5)
    high = [await database_sync_to_async(pending_proposal)(agent, risk=9) for _ in range(25)]
    low = [await database_sync_to_async(pending_proposal)(agent, risk=1) for _ in range(25)]
    burst = [(p, 9) for p in high] + [(p, 1) for p in low]  # the newest are all unwanted
    await send_notices(burst, agent)
    html = await receive_until(communicator, "notice")
    shown = [p.pk for p in high if f"#{p.pk} script.execute" in html]
    assert shown == [p.pk for p in high[-NOTICES_PER_PUSH:]]
    assert not any(f"#{p.pk} script.execute" in html for p in low)
    await communicator.disconnect()


async def test_a_proposal_page_gets_no_notice_about_the_proposal_it_shows(reviewer, agent):
    shown = await database_sync_to_async(pending_proposal)(agent)
    other = await database_sync_to_async(pending_proposal)(agent)
    communicator = await connect(reviewer, f"proposal={shown.pk}")
    await communicator.connect()
    await communicator.receive_from(timeout=5)
    await send_notice(shown, agent)  # the page itself shows it: a notice would cover the form
    await send_notice(other, agent)
    html = await receive_until(communicator, "notice")
    assert f"#{other.pk} script.execute" in html
    assert f"#{shown.pk} script.execute" not in html
    await communicator.disconnect()


@pytest.mark.parametrize("who", ["anonymous", "outsider", "agent"])
async def test_only_reviewers_may_listen(who, outsider, agent):
    from django.contrib.auth.models import AnonymousUser

    from approvals.agents.authentication import AgentPrincipal

    user = {"anonymous": AnonymousUser(), "outsider": outsider, "agent": AgentPrincipal(agent)}[who]
    communicator = await connect(user)
    connected, code = await communicator.connect()
    assert not connected and code == 4403


async def test_an_agent_token_header_is_refused(agent_and_token):
    communicator = WebsocketCommunicator(
        application,
        "/ws/queue/",
        headers=[
            (b"origin", b"http://localhost"),
            (b"authorization", f"Bearer {agent_and_token[1]}".encode()),
        ],
    )
    connected, code = await communicator.connect()
    assert not connected and code == 4403
