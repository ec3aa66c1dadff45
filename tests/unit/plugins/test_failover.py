"""RowAttempts: the rows a request tries and what each outcome does to the row and to the request's record
(modelgate/proxy/pipeline/failover.py; the forwarder and the realtime relay share it)."""

from __future__ import annotations

import random

import pytest

from modelgate.domain.errors import ServiceUnavailable
from modelgate.proxy.pipeline.failover import RowAttempts
from modelgate.proxy.upstream.model_rows import RowSelector
from tests.support.plugin_context import CHAT, PluginServices, StoredKey, context_before


async def _context(services: PluginServices, key: StoredKey, *, healthy: bool = True):
    ctx = await context_before("provider_filter", services, payload=CHAT, key=key.record)
    if healthy:  # rows are shared by the catalog: start every test healthy
        for row in ctx.rows:
            row.health.failures, row.health.cooled_until = 0, 0.0
    return ctx


async def test_each_row_tried_counts_as_an_attempt(services: PluginServices, key: StoredKey) -> None:
    ctx = await _context(services, key)

    tried = list(RowAttempts(RowSelector(30.0, 1, random.Random(1)), ctx))

    assert sorted(row.key for row in tried) == sorted(row.key for row in ctx.rows)
    assert ctx.attempts == len(ctx.rows)


async def test_a_failed_row_cools_down_and_the_next_request_skips_it(
    services: PluginServices, key: StoredKey
) -> None:
    selector = RowSelector(30.0, 1, random.Random(1))
    ctx = await _context(services, key)
    attempts = RowAttempts(selector, ctx)
    first = next(iter(attempts))

    attempts.failed(first, "http_503", "answered HTTP 503")

    assert ctx.row_failures == [(first, "http_503")]
    assert first not in list(RowAttempts(selector, await _context(services, key, healthy=False)))


async def test_a_row_that_cannot_carry_the_request_is_recorded_but_not_cooled_down(
    services: PluginServices, key: StoredKey
) -> None:
    selector = RowSelector(30.0, 1, random.Random(1))
    ctx = await _context(services, key)
    attempts = RowAttempts(selector, ctx)
    first = next(iter(attempts))

    attempts.cannot_carry(first, "no_realtime", "has no realtime endpoint")

    assert ctx.row_failures == [(first, "no_realtime")]
    assert (first.health.failures, first.health.cooled_until) == (0, 0.0)


async def test_every_row_cooling_down_is_503(services: PluginServices, key: StoredKey) -> None:
    selector = RowSelector(30.0, 1, random.Random(1))
    ctx = await _context(services, key)
    for row in ctx.rows:
        selector.failed(row)

    with pytest.raises(ServiceUnavailable):
        RowAttempts(selector, ctx)


async def test_a_body_that_cannot_be_replayed_gets_one_try(services: PluginServices, key: StoredKey) -> None:
    ctx = await _context(services, key)

    assert len(list(RowAttempts(RowSelector(30.0, 1), ctx, most=1))) == 1
