from django.urls import path

from infrastructure import converters  # noqa: F401 - registers <id:…>

from . import api

app_name = "executions-api"

urlpatterns = [
    path("executions", api.Executions.as_view(), name="list"),
    path("executions/<id:pk>", api.ExecutionDetail.as_view(), name="detail"),
    path("executions/<id:pk>/output", api.ExecutionOutput.as_view(), name="output"),
    path("executions/<id:pk>/cancel", api.ExecutionCancel.as_view(), name="cancel"),
    path("executions/<id:pk>/report", api.ExecutionReport.as_view(), name="report"),
]
