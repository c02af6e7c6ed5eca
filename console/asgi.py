"""ASGI entry point: ``/mcp`` first, then HTTP through Django (behind the door that turns a
flood away: ``approvals.agents.door``), websockets through Channels."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from infrastructure.handler import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from infrastructure import tracing  # noqa: E402

tracing.configure("airlock-web")  # nothing unless OTEL_EXPORTER_OTLP_ENDPOINT is set

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals.agents.door import at_the_door  # noqa: E402
from approvals.agents.mcp.http import with_mcp  # noqa: E402
from console.routing import websocket_urlpatterns  # noqa: E402
from console.ws_auth import BrowserOriginCheck, TokenOrSessionAuthMiddleware  # noqa: E402

application = with_mcp(
    ProtocolTypeRouter(
        {
            "http": at_the_door(django_asgi_app),
            "websocket": BrowserOriginCheck(
                TokenOrSessionAuthMiddleware(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)

# What is loaded by now lives as long as the process: out of the collector's
# way, a full collection walks the objects made since, not these 200,000 too
# (100-160 ms with the whole process stopped, a writer among its threads
# holding the database's writer lock meanwhile; 11-28 ms after).
gc.freeze()
