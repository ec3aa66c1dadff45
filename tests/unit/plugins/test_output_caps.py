"""Output caps: a request's cap is checked against its model, and one that names none gets the default,
sent upstream; the token estimate the later steps reserve is filled in."""

from __future__ import annotations

import orjson
import pytest

from modelgate.config.schema import CLAUDE_MAX_IMAGE_TOKENS
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


# -- input the body names but does not show (issue #32; modelgate/domain/hidden_input.py) ---------------

GPT_TEST_CONTEXT = 8000  # gpt-test's max_context_tokens
# gpt-test fails over to a Claude row: an image is bounded by Anthropic's formula (~1,600 tokens, whatever
# its detail), above OpenAI's tiles (85 + 8 x 170 = 1,445); tests/unit/test_charges.py has OpenAI's alone.
IMAGE_MOST = CLAUDE_MAX_IMAGE_TOKENS


def _image(detail: str | None = None) -> dict:
    inner = {"url": "https://images.example.com/a.png"}
    if detail is not None:
        inner["detail"] = detail
    return {"type": "image_url", "image_url": inner}


def _hidden(ctx) -> int:
    return ctx.admission.estimated_input_tokens - (len(ctx.body) // 2 + 1)


@pytest.mark.parametrize(
    ("parts", "hidden"),
    [
        ([{"type": "text", "text": "a file of images, in words only"}], 0),
        ([_image()], IMAGE_MOST),
        ([_image("high"), _image("auto")], 2 * IMAGE_MOST),
        ([_image("low"), _image("low"), _image("low")], 3 * IMAGE_MOST),
        ([{"type": "file", "file": {"file_id": "file-1"}}], GPT_TEST_CONTEXT),
        ([_image()] * 10, GPT_TEST_CONTEXT),  # 10 x 1,600 tokens pass the window: held to it
        ([{"type": {"image": 1}}, {"type": ["file"]}], 0),  # hostile shapes: no part, and no 500
    ],
    ids=[
        "words only",
        "one image",
        "high and auto",
        "three low",
        "file id",
        "ten images: the window",
        "unhashable types",
    ],
)
async def test_parts_the_body_only_names_are_added_to_the_input_estimate(
    services: PluginServices, key: StoredKey, parts: list, hidden: int
) -> None:
    ctx = await _capped(services, key, messages=[{"role": "user", "content": parts}])

    assert _hidden(ctx) == hidden


async def test_a_stored_prompt_and_hosted_tools_reserve_the_context_window(
    services: PluginServices, key: StoredKey
) -> None:
    prompt = await _capped(services, key, path="/v1/responses", prompt={"id": "pmpt_1"}, input="hi")
    search = await _capped(services, key, path="/v1/responses", tools=[{"type": "web_search"}], input="hi")
    function = await _capped(
        services, key, path="/v1/responses", tools=[{"type": "function", "name": "f"}], input="hi"
    )

    untyped = await _capped(
        services, key, path="/v1/messages", max_tokens=10, messages=MESSAGES, tools=[{"name": "f"}]
    )

    assert (_hidden(prompt), _hidden(search), _hidden(function)) == (GPT_TEST_CONTEXT, GPT_TEST_CONTEXT, 0)
    assert search.admission.hosted_tools and not function.admission.hosted_tools
    assert (_hidden(untyped), untyped.admission.hosted_tools) == (0, False)  # an Anthropic client tool


async def test_a_carried_context_is_added_and_everything_hidden_stays_within_the_window(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before(
        "output_caps",
        services,
        path="/v1/responses",
        payload={"model": "gpt-test", "input": [{"role": "user", "content": [_image("low")]}]},
        key=key.record,
    )
    ctx.admission.carried_input_tokens = 3_000  # what plugins.object_binding found for a previous response
    OutputCaps().on_request(ctx)
    assert _hidden(ctx) == 3_000 + IMAGE_MOST  # the carried context and a low-detail image (for Claude)

    ctx = await context_before(
        "output_caps",
        services,
        path="/v1/responses",
        payload={"model": "gpt-test", "input": [{"role": "user", "content": [{"type": "input_image"}] * 5}]},
        key=key.record,
    )
    ctx.admission.carried_input_tokens = 3_000
    OutputCaps().on_request(ctx)
    assert _hidden(ctx) == GPT_TEST_CONTEXT  # 3,000 + 5 x 1,445 passes the window: held to it
