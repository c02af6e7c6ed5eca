from django.urls import path

from . import api

app_name = "executions-api"

urlpatterns = [
    path("executions", api.Executions.as_view(), name="list"),
    path("executions/<int:pk>", api.ExecutionDetail.as_view(), name="detail"),
    path("executions/<int:pk>/output", api.ExecutionOutput.as_view(), name="output"),
    path("executions/<int:pk>/cancel", api.ExecutionCancel.as_view(), name="cancel"),
    path("executions/<int:pk>/report", api.ExecutionReport.as_view(), name="report"),
]
