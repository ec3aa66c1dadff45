"""The stream_errors plugin: a stream the provider broke off ends with an error event in the route's
format."""

from __future__ import annotations

import orjson

from modelgate.plugins.stream_errors import StreamErrors
from modelgate.proxy.upstream.http_client import UpstreamBrokeOff
from tests.support.plugin_context import CHAT, PluginServices, StoredKey, context_before


async def test_an_openai_style_stream_ends_with_a_data_error_object(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before("stream_errors", services, payload={**CHAT, "stream": True}, key=key.record)

    event = StreamErrors().on_stream_error(ctx, UpstreamBrokeOff("gone"))

    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert orjson.loads(event[6:])["error"]["code"] == "upstream_unavailable"


async def test_a_messages_stream_ends_with_an_anthropic_error_event(
    services: PluginServices, key: StoredKey
) -> None:
    payload = {
        "model": "gpt-test",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    ctx = await context_before(
        "stream_errors", services, path="/v1/messages", payload=payload, key=key.record
    )

    event = StreamErrors().on_stream_error(ctx, UpstreamBrokeOff("gone"))

    name, data = event.split(b"\n", 1)
    assert name == b"event: error"
    assert orjson.loads(data.removeprefix(b"data: "))["error"]["type"] == "api_error"
