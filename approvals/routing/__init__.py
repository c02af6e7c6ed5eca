"""Who decides what: teams and review routes, escalation and break-glass.

The policy document names the teams (``teams``: members by username and by
the identity provider's groups) and the review routes (``reviews``: first
match wins; each requires so many approvals from each of some teams). A
proposal's route is fixed when it is made (``Proposal.routing``); who is in a
team is read when someone decides, so a person who leaves a team (or a
provider's group, at their next sign-in) stops deciding for it at once.

- ``document``: the ``teams`` and ``reviews`` keys, validated (what a policy
  may say), and the ``Team`` and ``Route`` they become;
- ``membership``: who is in a team, and where each membership comes from;
- ``reviews``: what a routed proposal still needs, who may give it, and for
  which team an approval counts (one person, one team);
- ``escalation``: a silent team's proposals handed to the teams it escalates to.

May import ``approvals.models`` and ``approvals.choices``, ``accounts``,
``audit`` and ``infrastructure``; the approval core and the policy import it.
"""
