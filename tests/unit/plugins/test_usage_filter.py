"""The usage_filter plugin: usage withheld from the client and providers' prices never reach it, whole or
streamed; an event is decided only once it is complete."""

from __future__ import annotations

import orjson

from modelgate.plugins.usage_filter import UsageFilter
from modelgate.plugins.usage_metering import UsageMetering
from tests.support.plugin_context import CHAT, PluginServices, StoredKey, answer_head, context_before

USAGE_EVENT = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
CONTENT_EVENT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


async def _streaming(services: PluginServices, key: StoredKey, payload: dict):
    ctx = await context_before("usage_metering", services, payload=payload, key=key.record)
    UsageMetering(services.ledger, services.counters).on_request(ctx)
    plugin = UsageFilter()
    plugin.on_response_head(ctx, answer_head(ctx, content_type="text/event-stream", streamed=True))
    return ctx, plugin


async def test_usage_the_gateway_asked_for_is_taken_out_of_the_stream(
    services: PluginServices, key: StoredKey
) -> None:
    ctx, plugin = await _streaming(services, key, {**CHAT, "stream": True})

    assert plugin.on_chunk(ctx, CONTENT_EVENT + USAGE_EVENT) == CONTENT_EVENT
    assert plugin.on_end(ctx, b"") == b""


async def test_usage_the_client_asked_for_passes_as_sent(services: PluginServices, key: StoredKey) -> None:
    payload = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    ctx, plugin = await _streaming(services, key, payload)

    assert plugin.on_chunk(ctx, USAGE_EVENT) == USAGE_EVENT


async def test_an_event_split_across_chunks_is_held_until_it_completes(
    services: PluginServices, key: StoredKey
) -> None:
    ctx, plugin = await _streaming(services, key, {**CHAT, "stream": True})

    held = plugin.on_chunk(ctx, USAGE_EVENT[:30])
    rest = plugin.on_chunk(ctx, USAGE_EVENT[30:] + CONTENT_EVENT)

    assert (held, rest) == (b"", CONTENT_EVENT)


async def test_a_stream_cut_inside_an_event_hands_the_piece_on_at_its_end(
    services: PluginServices, key: StoredKey
) -> None:
    ctx, plugin = await _streaming(services, key, {**CHAT, "stream": True})

    assert plugin.on_chunk(ctx, CONTENT_EVENT[:20]) == b""
    assert plugin.on_end(ctx, b"") == CONTENT_EVENT[:20]


async def test_a_providers_price_is_taken_out_of_a_whole_answer(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("usage_metering", services, payload=CHAT, key=key.record)
    plugin = UsageFilter()
    plugin.on_response_head(ctx, answer_head(ctx))
    priced = orjson.dumps(
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "cost": 0.0042}, "cost": 1}
    )

    assert orjson.loads(plugin.on_chunk(ctx, priced)) == {
        "id": "c",
        "choices": [],
        "usage": {"prompt_tokens": 3},
    }


async def test_an_answer_of_a_route_no_provider_prices_passes_untouched(
    services: PluginServices, key: StoredKey
) -> None:
    payload = {"model": "gpt-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    ctx = await context_before(
        "usage_metering", services, path="/v1/messages", payload=payload, key=key.record
    )
    plugin = UsageFilter()
    plugin.on_response_head(ctx, answer_head(ctx))
    body = b'{"type":"message","cost":1}'

    assert plugin.on_chunk(ctx, body) is body
