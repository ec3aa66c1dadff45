"""Request tracing: the first step of the chain opens the request's span, completion closes it.

A no-op unless `[tracing] enabled = true`; the upstream and storage spans nest under this one.
"""

from __future__ import annotations

from modelgate.proxy.observability.tracing import RequestSpan, Tracer
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext


class RequestTracing(Plugin):
    """One span per model API request, with its route, model, row, status and tokens."""

    name = "tracing"
    essential = True

    def __init__(self, tracer: Tracer | None) -> None:
        self._tracer = tracer
        self._open: dict[int, RequestSpan] = {}  # id() of the context -> its span
        if tracer is None:  # tracing is off: the chain calls neither hook
            self.idle_hooks = frozenset({"on_request", "on_complete"})

    def on_request(self, ctx: RequestContext) -> None:
        if self._tracer is not None:
            self._open[id(ctx)] = self._tracer.start_request(ctx)

    def on_complete(self, ctx: RequestContext) -> None:
        opened = self._open.pop(id(ctx), None)
        if opened is not None and self._tracer is not None:
            self._tracer.end_request(opened, ctx)
