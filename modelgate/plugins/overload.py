"""Overload: past `server.max_open_requests` model API requests open in this process (streams included),
a new one is answered 503 with `retry-after` at once, before it costs a key lookup, a body read or an
upstream connection; the open ones keep their pace, and a load balancer sends the refused ones elsewhere.
"""

from __future__ import annotations

from modelgate.config import Config
from modelgate.domain.errors import Overloaded
from modelgate.proxy.observability.metrics import GatewayMetrics
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext


class Overload(Plugin):
    """Refuses a request that would take the process past its cap of open requests (0: no cap)."""

    name = "overload"
    essential = True  # server.max_open_requests = 0 switches the cap off
    requires = frozenset({"envelope"})  # the refusal is rendered in the route's envelope

    def __init__(self, config: Config, metrics: GatewayMetrics) -> None:
        self._cap = config.server.max_open_requests
        self._stats = metrics.stats  # `in_flight` counts this request too (modelgate/runtime.py)
        self._refused = metrics.rejections.labels("503", "overloaded")

    def on_request(self, ctx: RequestContext) -> None:  # type: ignore[override]
        cap = self._cap
        if cap and self._stats.in_flight > cap:
            self._refused.inc()
            raise Overloaded(cap)
