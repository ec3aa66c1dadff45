"""Output caps: a request's cap is checked against its model, and one that names none gets the default,
sent upstream; the token estimate the later steps reserve is filled in."""

from __future__ import annotations

import orjson
import pytest

from modelgate.domain.errors import InvalidRequest
from modelgate.plugins.output_caps import OutputCaps
from tests.support.plugin_context import PluginServices, StoredKey, context_before

MESSAGES = [{"role": "user", "content": "hi"}]


async def _capped(services: PluginServices, key: StoredKey, path: str = "/v1/chat/completions", **fields):
    ctx = await context_before(
        "output_caps", services, path=path, payload={"model": "gpt-test", **fields}, key=key.record
    )
    OutputCaps().on_request(ctx)
    return ctx


async def test_a_chat_without_a_cap_gets_the_models_default_sent_upstream(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _capped(services, key, messages=MESSAGES)

    assert ctx.admission.max_output_tokens == 1000  # gpt-test's default_max_tokens
    assert orjson.loads(ctx.upstream_body())["max_completion_tokens"] == 1000
    assert ctx.admission.estimated_input_tokens == len(ctx.body) // 2 + 1


async def test_a_cap_the_request_names_is_kept_and_the_body_left_as_sent(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _capped(services, key, messages=MESSAGES, max_tokens=300)

    assert ctx.admission.max_output_tokens == 300
    assert not ctx.payload_changed


async def test_n_multiplies_the_allowance(services: PluginServices, key: StoredKey) -> None:
    ctx = await _capped(services, key, messages=MESSAGES, max_tokens=300, n=3)

    assert ctx.admission.max_output_tokens == 900


@pytest.mark.parametrize(
    ("cap", "message"),
    [
        (8001, "at most 8000 is allowed here, got 8001"),
        (0, "expected an integer of at least 1"),
        ("9", "at least 1"),
    ],
)
async def test_a_cap_the_model_cannot_honour_is_400(
    services: PluginServices, key: StoredKey, cap: object, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message) as caught:
        await _capped(services, key, messages=MESSAGES, max_completion_tokens=cap)

    assert caught.value.status == 400


async def test_legacy_completions_default_to_16_tokens(services: PluginServices, key: StoredKey) -> None:
    ctx = await _capped(services, key, path="/v1/completions", prompt="Say hi")

    assert ctx.admission.max_output_tokens == 16
    assert ctx.payload["max_tokens"] == 16


async def test_embeddings_reserve_no_output(services: PluginServices, key: StoredKey) -> None:
    ctx = await _capped(services, key, path="/v1/embeddings", input="hello")

    assert ctx.admission.max_output_tokens == 1
    assert not ctx.payload_changed
