"""Metrics: every finished request moves the Prometheus counters and histograms of its process.

Runs after usage metering, so tokens are known; labels come from the config (route, model, row), never
from client input, so their number stays bounded.
"""

from __future__ import annotations

import time

from modelgate.domain.errors import GatewayError, UpstreamClientError
from modelgate.proxy.observability.metrics import GatewayMetrics
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import AnswerHead, RequestContext

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
    requires = frozenset(
        {
            "attempts",
            "error",
            "first_byte_at",
            "metering",
            "model",
            "response_headers",
            "route",
            "row",
            "row_failures",
            "status",
            "stream",
        }
    )
    essential = True

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics
        self._stats = metrics.stats
        self._streaming: set[int] = set()  # id() of contexts whose stream is being relayed

    def on_response_head(self, ctx: RequestContext, head: AnswerHead) -> None:
        # The forwarder's own test for relaying a stream rather than reading a whole body.
        if ctx.stream or ctx.response_headers.get("content-type", "").startswith("text/event-stream"):
            self._streaming.add(id(ctx))
            self._stats.streams += 1

    def on_complete(self, ctx: RequestContext) -> None:
        stats = self._stats
        if self._streaming and id(ctx) in self._streaming:
            self._streaming.discard(id(ctx))
            stats.streams -= 1
        route = ctx.route.name if ctx.route is not None else "unsupported"
        model = ctx.model.name if ctx.model is not None else ""
        labels = (route, model, ctx.row.key if ctx.row else "", str(ctx.status))
        stats.requests[labels] = stats.requests.get(labels, 0) + 1
        stats.observe(stats.durations, (route, model), time.perf_counter() - ctx.started)
        if ctx.first_byte_at is not None:
            stats.observe(stats.first_bytes, (route, model), ctx.first_byte_at - ctx.started)
        usage = ctx.metering.usage
        if usage is not None and model:
            stats.count_tokens(model, usage)
        error = ctx.error
        if error is None and not ctx.row_failures and ctx.attempts <= 1:
            return  # the rest counts failures
        metrics = self._metrics
        for row, reason in ctx.row_failures:
            metrics.upstream_errors.labels(row.provider, row.key, reason).inc()
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
