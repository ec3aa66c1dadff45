"""Metrics: every finished request moves its process's counters and histograms; failures are counted by
kind, with labels from the config only."""

from __future__ import annotations

from modelgate.domain.errors import RateLimited, UpstreamClientError
from modelgate.plugins.metrics import Metrics
from modelgate.proxy.observability.metrics import GatewayMetrics
from modelgate.proxy.pipeline.context import Usage
from tests.support.plugin_context import (
    CHAT,
    PluginServices,
    StoredKey,
    answer_head,
    answered,
    context_before,
    request_context,
)

OPENAI_ROW = "openai/gpt-test-2025@openai.test"


async def _chat(services: PluginServices, key: StoredKey, **fields: object):
    return await context_before("metrics", services, payload={**CHAT, **fields}, key=key.record)


def _sample(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_a_request_is_counted_by_route_model_row_and_status(
    services: PluginServices, key: StoredKey
) -> None:
    metrics = GatewayMetrics()
    ctx = await _chat(services, key)
    answered(ctx, body=b"{}")
    ctx.metering.usage = Usage(input_tokens=12, output_tokens=5)

    Metrics(metrics).on_complete(ctx)

    stats = metrics.stats
    assert stats.requests == {("chat_completions", "gpt-test", OPENAI_ROW, "200"): 1}
    assert sum(stats.durations[("chat_completions", "gpt-test")][:-1]) == 1
    assert sum(stats.first_bytes[("chat_completions", "gpt-test")][:-1]) == 1
    assert (stats.tokens[("gpt-test", "input")], stats.tokens[("gpt-test", "output")]) == (12, 5)


async def test_a_request_outside_the_reference_is_counted_as_unsupported() -> None:
    metrics = GatewayMetrics()
    ctx = request_context("POST", "/v1/assistants", body={})
    ctx.status = 404

    Metrics(metrics).on_complete(ctx)

    assert metrics.stats.requests == {("unsupported", "", "", "404"): 1}


async def test_a_gateway_refusal_is_counted_with_its_reason(services: PluginServices, key: StoredKey) -> None:
    metrics = GatewayMetrics()
    ctx = await _chat(services, key)
    ctx.error, ctx.status = RateLimited("slow down"), 429

    Metrics(metrics).on_complete(ctx)

    assert _sample(metrics, "modelgate_rejections_total", status="429", reason="rate_limit") == 1


async def test_a_providers_4xx_is_no_gateway_refusal(services: PluginServices, key: StoredKey) -> None:
    metrics = GatewayMetrics()
    ctx = await _chat(services, key)
    answered(ctx, status=400)
    ctx.error = UpstreamClientError(400, "bad messages")

    Metrics(metrics).on_complete(ctx)

    assert _sample(metrics, "modelgate_rejections_total", status="400", reason="invalid_request") is None


async def test_failed_rows_and_the_failover_are_counted(services: PluginServices, key: StoredKey) -> None:
    metrics = GatewayMetrics()
    ctx = await _chat(services, key)
    ctx.row_failures.append((ctx.rows[0], "http_503"))
    ctx.attempts = 1  # the failed try; answered() adds the second
    answered(ctx, body=b"{}", row_index=1)

    Metrics(metrics).on_complete(ctx)

    assert (
        _sample(
            metrics, "modelgate_upstream_errors_total", provider="openai", row=OPENAI_ROW, reason="http_503"
        )
        == 1
    )
    assert _sample(metrics, "modelgate_failovers_total", model="gpt-test") == 1


async def test_a_stream_is_counted_open_from_its_head_until_it_completes(
    services: PluginServices, key: StoredKey
) -> None:
    metrics, ctx = GatewayMetrics(), await _chat(services, key, stream=True)
    plugin = Metrics(metrics)

    plugin.on_response_head(ctx, answer_head(ctx, content_type="text/event-stream", streamed=True))
    open_streams = metrics.stats.streams
    answered(ctx, body=b"data: [DONE]\n\n")
    plugin.on_complete(ctx)

    assert (open_streams, metrics.stats.streams) == (1, 0)
