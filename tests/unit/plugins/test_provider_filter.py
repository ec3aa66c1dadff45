"""The `provider` object: `only` and `host` keep the matching rows; it never goes upstream."""

from __future__ import annotations

import orjson
import pytest

from modelgate.domain.errors import InvalidProviderObject
from modelgate.plugins.provider_filter import ProviderFilter
from tests.support.plugin_context import PluginServices, context_before

MESSAGES = [{"role": "user", "content": "hi"}]


async def _filtered(services: PluginServices, provider: object, model: str = "gpt-test"):
    payload = {"model": model, "messages": MESSAGES, "provider": provider}
    ctx = await context_before("provider_filter", services, payload=payload)
    ProviderFilter(services.catalog).on_request(ctx)
    return ctx


async def test_a_request_without_the_object_keeps_every_row_and_its_body(services: PluginServices) -> None:
    ctx = await context_before(
        "provider_filter", services, payload={"model": "gpt-test", "messages": MESSAGES}
    )

    ProviderFilter(services.catalog).on_request(ctx)

    assert len(ctx.rows) == 2
    assert not ctx.payload_changed


async def test_only_keeps_the_named_providers_rows_and_strips_the_object(services: PluginServices) -> None:
    ctx = await _filtered(services, {"only": ["anthropic"]})

    assert [row.provider for row in ctx.rows] == ["anthropic"]
    assert "provider" not in orjson.loads(ctx.upstream_body())


async def test_host_keeps_the_rows_on_that_host(services: PluginServices) -> None:
    ctx = await _filtered(services, {"host": "openai.test"})

    assert [row.host for row in ctx.rows] == ["openai.test"]


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        ("openai", "'provider' must be an object"),
        ({"order": ["openai"]}, "unknown field(s) in 'provider': order"),
        ({"only": ["azure"]}, "names unknown provider(s): azure"),
        ({"only": []}, "'provider.only' must be a provider name or a non-empty list"),
        ({"host": "elsewhere.test"}, "names an unknown host: elsewhere.test"),
    ],
    ids=["not an object", "unknown field", "unknown provider", "empty only", "unknown host"],
)
async def test_an_invalid_object_is_400_in_envelope_a(
    services: PluginServices, provider: object, message: str
) -> None:
    with pytest.raises(InvalidProviderObject) as caught:
        await _filtered(services, provider)

    assert caught.value.status == 400
    assert caught.value.always_envelope_a  # also on /v1/messages, as the spec says
    assert message in caught.value.message


async def test_an_object_no_row_of_the_model_matches_is_400(services: PluginServices) -> None:
    with pytest.raises(InvalidProviderObject, match="no routing row of model 'openai-only' matches"):
        await _filtered(services, {"only": "anthropic"}, model="openai-only")
