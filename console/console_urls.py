"""The reviewer console's pages, one namespace ("console") over the apps' views."""

from django.urls import path

from approvals import views as approvals
from executions import views as executions

from . import views

app_name = "console"

urlpatterns = [
    path("", approvals.home, name="home"),
    path("queue/", approvals.queue, name="queue"),
    path("overview/", approvals.overview_page, name="overview"),
    path("proposals/<int:pk>/", approvals.proposal_detail, name="proposal"),
    path(
        "proposals/<int:pk>/<str:kind>/",
        approvals.decide,
        name="decide",
    ),
    path("history/", approvals.history, name="history"),
    path("profile/", approvals.profile, name="profile"),
    path("profile/slack/code/", approvals.profile_slack_code, name="profile-slack-code"),
    path("profile/slack/unlink/", approvals.profile_slack_unlink, name="profile-slack-unlink"),
    path("review/<str:token>/", approvals.review_link, name="review-link"),
    path("executions/<int:pk>/", executions.execution_detail, name="execution"),
    path("executions/<int:pk>/status/", executions.execution_status, name="execution-status"),
    path("executions/<int:pk>/cancel/", executions.cancel, name="cancel"),
    path("manage/policy/", approvals.policy_editor, name="policy"),
    path("manage/policy/versions/", approvals.policy_versions, name="policy-versions"),
    path("manage/policy/suggestions/", approvals.policy_suggestions, name="policy-suggestions"),
    path("manage/agents/", approvals.agents, name="agents"),
    path(
        "manage/agents/<int:pk>/<str:operation>/",
        approvals.agent_action,
        name="agent-action",
    ),
    path("manage/users/", views.users, name="users"),
    path("manage/users/<int:pk>/reviewer/", views.set_reviewer, name="set-reviewer"),
    path("manage/audit/", views.audit_trail, name="audit"),
    path("manage/deliveries/", approvals.deliveries, name="deliveries"),
]
