"""Overload: past `server.max_open_requests` open requests, a new one is refused 503 + retry-after at once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from modelgate.domain.errors import Overloaded
from modelgate.plugins.overload import Overload
from modelgate.proxy.observability.metrics import GatewayMetrics
from tests.support.plugin_context import gateway_config, request_context


def _overload(tmp_path, cap: int, open_requests: int) -> tuple[Overload, GatewayMetrics]:
    config = gateway_config(tmp_path)
    config = replace(config, server=replace(config.server, max_open_requests=cap))
    metrics = GatewayMetrics()
    metrics.stats.in_flight = open_requests  # the dispatcher counts the request being handled too
    return Overload(config, metrics), metrics


def _refused(metrics: GatewayMetrics) -> float | None:
    return metrics.registry.get_sample_value(
        "modelgate_rejections_total", {"status": "503", "reason": "overloaded"}
    )


async def test_a_request_within_the_cap_passes(tmp_path) -> None:
    plugin, metrics = _overload(tmp_path, cap=3, open_requests=3)

    plugin.on_request(request_context("POST", "/v1/chat/completions", body={"model": "gpt-test"}))

    assert _refused(metrics) == 0


async def test_the_request_past_the_cap_is_503_with_retry_after_and_counted(tmp_path) -> None:
    plugin, metrics = _overload(tmp_path, cap=3, open_requests=4)

    with pytest.raises(Overloaded) as caught:
        plugin.on_request(request_context("POST", "/v1/chat/completions", body={"model": "gpt-test"}))

    assert (caught.value.status, caught.value.code, caught.value.headers) == (
        503,
        "upstream_unavailable",
        {"retry-after": "1"},
    )
    assert _refused(metrics) == 1


async def test_a_cap_of_0_is_no_cap(tmp_path) -> None:
    plugin, _metrics = _overload(tmp_path, cap=0, open_requests=1_000_000)

    plugin.on_request(request_context("POST", "/v1/chat/completions", body={"model": "gpt-test"}))
