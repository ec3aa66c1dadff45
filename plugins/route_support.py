"""Route support: only the model API reference is served; everything else is 404 `route not supported`.

Also decides, once, which error envelope the request is owed.
"""

from __future__ import annotations

from plugins.base import Plugin
from proxy.context import RequestContext
from proxy.envelopes import Envelope
from proxy.errors import MethodNotAllowed, RouteNotSupported
from proxy.routes import RouteTable

VENDOR_VERSION_HEADER = "anthropic-version"


class RouteSupport(Plugin):
    """Matches the route; unknown paths stop the chain with 404."""

    name = "route_support"
    essential = True

    def __init__(self, table: RouteTable) -> None:
        self._table = table

    async def on_request(self, ctx: RequestContext) -> None:
        request = ctx.request
        route, object_id, known_path = self._table.match(request.method, request.path)
        if route is None:
            if known_path:
                raise MethodNotAllowed(f"method {request.method} is not allowed on {request.path}")
            raise RouteNotSupported()
        ctx.route = route
        ctx.object_id = object_id
        if route.envelope is Envelope.B or (
            route.envelope_b_with_version_header and VENDOR_VERSION_HEADER in request.headers
        ):
            ctx.envelope = Envelope.B
