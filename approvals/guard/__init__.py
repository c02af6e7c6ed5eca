"""What keeps one agent from taking more than its share: its limits and its pause.

Owns admission (``admission``: a proposal is let in only while the agent is
not paused, has fewer than ``max_pending`` proposals waiting and has a token
left in its ``max_proposals_per_minute`` bucket; a refusal writes no
proposal, is counted, and the first of a burst is audited) and the streak of
rejections that pauses an agent (``streak``). The limits are policy keys
(``approvals.policy.limits``); the pause and resume workflows, which tell
people, are the core's (``approvals.core.pausing``).

May import ``approvals.policy``, the app's models and vocabulary, ``audit``
and ``infrastructure``; the core calls it, never the other way round.
"""
