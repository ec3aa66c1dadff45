"""Metrics: every finished request moves the Prometheus counters and histograms of its process.

Runs after usage metering, so tokens are known; labels come from the config (route, model, row), never
from client input, so their number stays bounded.
"""

from __future__ import annotations

import time
from typing import Any

from plugins.base import Plugin
from proxy.context import RequestContext
from proxy.errors import GatewayError, UpstreamClientError
from proxy.metrics import GatewayMetrics

# Why the gateway refused a request, by status (the metric label; bounded).
_REJECTION_REASONS = {
    400: "invalid_request",
    401: "authentication",
    402: "insufficient_balance",
    403: "policy",
    404: "not_found",
    405: "method_not_allowed",
    409: "request_in_progress",
    413: "request_too_large",
    429: "rate_limit",
}


class Metrics(Plugin):
    """Counts requests, rejections, upstream failures and failovers; times answers and first bytes."""

    name = "metrics"
    essential = True

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics
        self._streaming: set[int] = set()  # id() of contexts whose stream is being relayed
        # Labelled children by label values: prometheus-client validates labels on every .labels() call.
        self._children: dict[tuple, Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def on_response_head(self, ctx: RequestContext, status: int, headers: Any) -> None:
        # The forwarder's own test for relaying a stream rather than reading a whole body.
        if ctx.stream or ctx.response_headers.get("content-type", "").startswith("text/event-stream"):
            self._streaming.add(id(ctx))
            self._metrics.active_streams.inc()

    def on_complete(self, ctx: RequestContext) -> None:
        metrics = self._metrics
        if id(ctx) in self._streaming:
            self._streaming.discard(id(ctx))
            metrics.active_streams.dec()
        route = ctx.route.name if ctx.route is not None else "unsupported"
        model = ctx.model.name if ctx.model is not None else ""
        self._child(metrics.requests, route, model, ctx.row.key if ctx.row else "", str(ctx.status)).inc()
        self._child(metrics.request_duration, route, model).observe(time.perf_counter() - ctx.started)
        if ctx.first_byte_at is not None:
            self._child(metrics.time_to_first_byte, route, model).observe(ctx.first_byte_at - ctx.started)
        for row, reason in ctx.row_failures:
            metrics.upstream_errors.labels(row.provider, row.key, reason).inc()
        error = ctx.error
        if error is not None and not isinstance(error, GatewayError) and ctx.row and ctx.status < 500:
            # Bytes had reached the client when the provider broke off: no failover was possible.
            metrics.upstream_errors.labels(ctx.row.provider, ctx.row.key, "stream_broken").inc()
        if ctx.attempts > 1:
            metrics.failovers.labels(model).inc(ctx.attempts - 1)
        if (
            isinstance(error, GatewayError)
            and not isinstance(error, UpstreamClientError)
            and error.status < 500
        ):
            metrics.rejections.labels(str(error.status), _REJECTION_REASONS.get(error.status, "other")).inc()
        usage = ctx.usage
        if usage is not None and model:
            self._child(metrics.tokens, model, "input").inc(usage.input_tokens)
            self._child(metrics.tokens, model, "cached_input").inc(usage.cached_input_tokens)
            self._child(metrics.tokens, model, "output").inc(usage.output_tokens)
