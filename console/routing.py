"""The websocket routes. A path none of them takes (``ws/executions/<id past any key>/``,
``ws/nope/``) is refused at the handshake (403), as an unknown execution is; without the
last route Channels raises "No route found", a server error."""

from channels.security.websocket import WebsocketDenier
from django.urls import path, re_path

from approvals.review.consumers import QueueConsumer
from executions.consumers import ExecutionOutputConsumer
from infrastructure import converters  # noqa: F401 - registers <id:…>

websocket_urlpatterns = [
    path("ws/executions/<id:execution_id>/", ExecutionOutputConsumer.as_asgi()),
    path("ws/queue/", QueueConsumer.as_asgi()),
    re_path(r"", WebsocketDenier.as_asgi()),
]
