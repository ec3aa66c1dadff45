"""Request validation: `stream` and the gateway's own parameter rules per route, before any routing."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest
from modelgate.plugins.request_validation import RequestValidation
from tests.support.plugin_context import PluginServices, context_before

MESSAGES = [{"role": "user", "content": "hi"}]


async def _validated(services: PluginServices, path: str, payload: dict):
    ctx = await context_before("request_validation", services, path=path, payload=payload)
    RequestValidation().on_request(ctx)
    return ctx


async def test_stream_true_is_recorded_for_the_later_steps(services: PluginServices) -> None:
    ctx = await _validated(services, "/v1/chat/completions", {"model": "gpt-test", "stream": True})

    assert ctx.stream is True


async def test_stream_null_means_not_given(services: PluginServices) -> None:
    ctx = await _validated(services, "/v1/chat/completions", {"model": "gpt-test", "stream": None})

    assert ctx.stream is False


async def test_a_stream_that_is_no_boolean_is_400(services: PluginServices) -> None:
    with pytest.raises(InvalidRequest, match="expected a boolean, got a string") as caught:
        await _validated(services, "/v1/chat/completions", {"model": "gpt-test", "stream": "yes"})

    assert caught.value.status == 400


async def test_streaming_a_route_that_does_not_stream_is_400(services: PluginServices) -> None:
    with pytest.raises(InvalidRequest, match="streaming is not supported on /v1/embeddings"):
        await _validated(services, "/v1/embeddings", {"model": "gpt-test", "input": "x", "stream": True})


async def test_a_messages_request_without_max_tokens_is_400(services: PluginServices) -> None:
    with pytest.raises(InvalidRequest, match="max_tokens: Field required"):
        await _validated(services, "/v1/messages", {"model": "gpt-test", "messages": MESSAGES})


async def test_a_background_response_that_is_not_stored_is_400(services: PluginServices) -> None:
    with pytest.raises(InvalidRequest, match="'background' requires 'store' to be true"):
        await _validated(
            services, "/v1/responses", {"model": "gpt-test", "input": "x", "background": True, "store": False}
        )


async def test_a_nul_is_refused_in_a_looked_up_field_but_passed_in_the_prompt(
    services: PluginServices,
) -> None:
    prompt = {"model": "gpt-test", "messages": [{"role": "user", "content": "a\x00b"}]}
    await _validated(services, "/v1/chat/completions", prompt)

    with pytest.raises(InvalidRequest, match="Invalid 'user'"):
        await _validated(services, "/v1/chat/completions", {**prompt, "user": "u\x00"})


async def test_a_decision_request_needs_typed_questions(services: PluginServices) -> None:
    with pytest.raises(InvalidRequest, match=r"questions\[0\].type must be one of"):
        await _validated(
            services, "/v1/decisions", {"model": "gpt-test", "input": "x", "questions": [{"type": "essay"}]}
        )
