"""Native features: thinking, prompt caching and token counting keep only the native Messages rows."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest
from modelgate.plugins.native_features import NativeFeatures
from modelgate.plugins.provider_filter import ProviderFilter
from tests.support.plugin_context import PluginServices, context_before

MESSAGES = [{"role": "user", "content": "hi"}]


async def _messages(services: PluginServices, path: str = "/v1/messages", **fields: object):
    payload = {"model": "gpt-test", "max_tokens": 100, "messages": MESSAGES, **fields}
    return await context_before("native_features", services, path=path, payload=payload)


async def test_a_plain_messages_request_keeps_every_row(services: PluginServices) -> None:
    ctx = await _messages(services)

    NativeFeatures().on_request(ctx)

    assert [row.provider for row in ctx.rows] == ["openai", "anthropic"]


async def test_extended_thinking_keeps_only_the_native_rows(services: PluginServices) -> None:
    ctx = await _messages(services, thinking={"type": "enabled", "budget_tokens": 1024})

    NativeFeatures().on_request(ctx)

    assert [row.provider for row in ctx.rows] == ["anthropic"]


async def test_thinking_disabled_is_no_native_feature(services: PluginServices) -> None:
    ctx = await _messages(services, thinking={"type": "disabled"})

    NativeFeatures().on_request(ctx)

    assert len(ctx.rows) == 2


async def test_a_cache_control_mark_on_a_message_block_keeps_only_the_native_rows(
    services: PluginServices,
) -> None:
    block = {"type": "text", "text": "long context", "cache_control": {"type": "ephemeral"}}
    ctx = await _messages(services, messages=[{"role": "user", "content": [block]}])

    NativeFeatures().on_request(ctx)

    assert [row.provider for row in ctx.rows] == ["anthropic"]


async def test_token_counting_keeps_only_the_native_rows(services: PluginServices) -> None:
    ctx = await _messages(services, path="/v1/messages/count_tokens")

    NativeFeatures().on_request(ctx)

    assert [row.provider for row in ctx.rows] == ["anthropic"]


async def test_a_model_without_a_native_row_is_400(services: PluginServices) -> None:
    ctx = await _messages(services, model="openai-only", thinking={"type": "enabled", "budget_tokens": 1024})

    with pytest.raises(InvalidRequest, match="model 'openai-only' has none") as caught:
        NativeFeatures().on_request(ctx)

    assert caught.value.status == 400
    assert (
        "extended thinking is only available on the native providers of /v1/messages" in caught.value.message
    )


async def test_a_provider_object_that_left_no_native_row_is_400_saying_so(services: PluginServices) -> None:
    ctx = await _messages(
        services, thinking={"type": "enabled", "budget_tokens": 1024}, provider={"only": "openai"}
    )
    ProviderFilter(services.catalog).on_request(ctx)

    with pytest.raises(InvalidRequest, match="none of the rows the 'provider' object left"):
        NativeFeatures().on_request(ctx)
