from django.urls import path

from approvals.review.consumers import QueueConsumer
from executions.consumers import ExecutionOutputConsumer

websocket_urlpatterns = [
    path("ws/executions/<int:execution_id>/", ExecutionOutputConsumer.as_asgi()),
    path("ws/queue/", QueueConsumer.as_asgi()),
]
