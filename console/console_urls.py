"""The reviewer console's pages, one namespace ("console") over the apps' views."""

from django.urls import path

from approvals.review.views import (
    agents,
    batch,
    deliveries,
    links,
    policy,
    profile,
    proposals,
    reveal,
    teams,
    upstreams,
)
from executions import views as executions
from infrastructure import converters  # noqa: F401 - registers <id:…>

from . import views

app_name = "console"

urlpatterns = [
    path("", proposals.home, name="home"),
    path("queue/", proposals.queue, name="queue"),
    path("queue/<str:kind>/", batch.decide_many_page, name="decide-many"),
    path("overview/", proposals.overview_page, name="overview"),
    path("proposals/<id:pk>/", proposals.proposal_detail, name="proposal"),
    path(
        "proposals/<id:pk>/break-glass-reviewed/",
        proposals.break_glass_reviewed,
        name="break-glass-reviewed",
    ),
    path("proposals/<id:pk>/reveal/", reveal.reveal, name="reveal"),
    path("proposals/<id:pk>/<str:kind>/", proposals.decide, name="decide"),
    path("history/", proposals.history, name="history"),
    path("profile/", profile.profile, name="profile"),
    path("profile/slack/code/", profile.profile_slack_code, name="profile-slack-code"),
    path("profile/slack/unlink/", profile.profile_slack_unlink, name="profile-slack-unlink"),
    path("profile/security/", profile.security, name="security"),
    path("profile/security/sign-out/", profile.sign_out_everywhere, name="sign-out-everywhere"),
    path("profile/tokens/new/", profile.new_token, name="new-token"),
    path("profile/tokens/<id:pk>/revoke/", profile.revoke_token, name="revoke-token"),
    path("review/<str:token>/", links.review_link, name="review-link"),
    path("executions/<id:pk>/", executions.execution_detail, name="execution"),
    path("executions/<id:pk>/status/", executions.execution_status, name="execution-status"),
    path("executions/<id:pk>/cancel/", executions.cancel, name="cancel"),
    path("manage/policy/", policy.policy_editor, name="policy"),
    path("manage/policy/versions/", policy.policy_versions, name="policy-versions"),
    path("manage/policy/apply/", policy.policy_apply, name="policy-apply"),
    path("manage/policy/suggestions/", policy.policy_suggestions, name="policy-suggestions"),
    path("manage/teams/", teams.teams, name="teams"),
    path("manage/agents/", agents.agents, name="agents"),
    path("manage/agents/all/<str:operation>/", agents.agents_all, name="agents-all"),
    path("manage/agents/<id:pk>/<str:operation>/", agents.agent_action, name="agent-action"),
    path("manage/upstreams/", upstreams.upstreams, name="upstreams"),
    path("manage/upstreams/<str:name>/", upstreams.upstreams, name="upstream"),
    path(
        "manage/upstreams/<str:name>/<str:operation>/",
        upstreams.upstream_action,
        name="upstream-action",
    ),
    path("manage/users/", views.users, name="users"),
    path("manage/users/<id:pk>/reviewer/", views.set_reviewer, name="set-reviewer"),
    path("manage/users/<id:pk>/end-access/", views.end_access, name="end-access"),
    path("manage/audit/", views.audit_trail, name="audit"),
    path("manage/deliveries/", deliveries.deliveries, name="deliveries"),
]
