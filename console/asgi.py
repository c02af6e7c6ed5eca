"""ASGI entry point: ``/mcp`` first, then HTTP through Django, websockets through Channels."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from console.handler import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from approvals.mcp.http import with_mcp  # noqa: E402
from console.routing import websocket_urlpatterns  # noqa: E402
from console.ws_auth import TokenOrSessionAuthMiddleware  # noqa: E402

application = with_mcp(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(
                TokenOrSessionAuthMiddleware(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)
