"""Route support: only the model API reference is served; everything else is 404 `route not supported`.

Also decides, once, which error envelope the request is owed, and refuses a URL whose path or query has a
NUL or invalid UTF-8 (400 in that envelope; modelgate/proxy/http/url_text.py).
"""

from __future__ import annotations

from modelgate.domain.errors import InvalidRequest, RouteNotSupported
from modelgate.proxy.http.url_text import url_text_problem
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.envelopes import Envelope
from modelgate.proxy.pipeline.route_table import RouteTable

VENDOR_VERSION_HEADER = "anthropic-version"


class RouteSupport(Plugin):
    """Matches the route; unknown paths stop the chain with 404."""

    name = "route_support"
    provides = frozenset({"route", "envelope", "object_id"})
    essential = True

    def __init__(self, table: RouteTable) -> None:
        self._table = table

    def on_request(self, ctx: RequestContext) -> None:
        request = ctx.request
        route, object_id = self._table.match(request.method, request.path)
        if route is None:
            # A known path with a method it does not serve is outside the reference too (the spec has no 405).
            raise RouteNotSupported()
        ctx.route = route
        ctx.object_id = object_id
        if route.envelope is Envelope.B or (
            route.envelope_b_with_version_header and VENDOR_VERSION_HEADER in request.headers
        ):
            ctx.envelope = Envelope.B
        if problem := url_text_problem(request.raw_path):
            raise InvalidRequest(problem)
