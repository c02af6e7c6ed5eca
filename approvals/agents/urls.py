from django.urls import path

from approvals.agents import api
from approvals.agents.waiting import long_poll, wait_for_rows
from approvals.policy import api as policy_api

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
            )
        ),
        name="create",
    ),
    path(
        "proposals/<int:pk>",
        long_poll(api.ProposalDetail.as_view(), finish=api.inline_result),
        name="detail",
    ),
    path("proposals/<int:pk>/approve", api.ProposalApprove.as_view(), name="approve"),
    path("proposals/<int:pk>/reject", api.ProposalReject.as_view(), name="reject"),
    path("capabilities", api.Capabilities.as_view(), name="capabilities"),
    path("sandboxes", api.Sandboxes.as_view(), name="sandboxes"),
    path("sandboxes/<int:pk>", api.SandboxDetail.as_view(), name="sandbox"),
    path("sandboxes/<int:pk>/execute", api.SandboxExecute.as_view(), name="sandbox-execute"),
    path("policy/export", policy_api.PolicyExport.as_view(), name="policy-export"),
    path("policy/apply", policy_api.PolicyApply.as_view(), name="policy-apply"),
    path("policy/simulate", policy_api.PolicySimulate.as_view(), name="policy-simulate"),
    path("policy/versions", policy_api.PolicyVersions.as_view(), name="policy-versions"),
]
