from django.urls import path

from approvals.agents import agents_api, api, batch_api
from approvals.agents.listing import list_interest
from approvals.agents.waiting import long_poll, wait_for_rows
from approvals.policy import api as policy_api
from infrastructure import converters  # noqa: F401 - registers <id:…>

app_name = "approvals-api"

urlpatterns = [
    path(
        "proposals",
        wait_for_rows(
            long_poll(
                api.Proposals.as_view(),
                read_again=api.proposal_data,
                methods=("POST",),
                finish=api.inline_result,
            ),
            interest=list_interest,
        ),
        name="create",
    ),
    path(
        "proposals/<id:pk>",
        long_poll(api.ProposalDetail.as_view(), finish=api.inline_result),
        name="detail",
    ),
    path("proposals/approve", batch_api.BatchApprove.as_view(), name="approve-many"),
    path("proposals/reject", batch_api.BatchReject.as_view(), name="reject-many"),
    path("proposals/<id:pk>/approve", api.ProposalApprove.as_view(), name="approve"),
    path("proposals/<id:pk>/reject", api.ProposalReject.as_view(), name="reject"),
    path("proposals/<id:pk>/withdraw", api.ProposalWithdraw.as_view(), name="withdraw"),
    path("agents", agents_api.Agents.as_view(), name="agents"),
    path("agents/pause", agents_api.PauseAll.as_view(), name="agents-pause"),
    path("agents/resume", agents_api.ResumeAll.as_view(), name="agents-resume"),
    path("agents/<str:name>/pause", agents_api.Pause.as_view(), name="agent-pause"),
    path("agents/<str:name>/resume", agents_api.Resume.as_view(), name="agent-resume"),
    path("capabilities", api.Capabilities.as_view(), name="capabilities"),
    path("sandboxes", api.Sandboxes.as_view(), name="sandboxes"),
    path("sandboxes/<id:pk>", api.SandboxDetail.as_view(), name="sandbox"),
    path("sandboxes/<id:pk>/execute", api.SandboxExecute.as_view(), name="sandbox-execute"),
    path("policy/export", policy_api.PolicyExport.as_view(), name="policy-export"),
    path("policy/apply", policy_api.PolicyApply.as_view(), name="policy-apply"),
    path("policy/simulate", policy_api.PolicySimulate.as_view(), name="policy-simulate"),
    path("policy/versions", policy_api.PolicyVersions.as_view(), name="policy-versions"),
]
