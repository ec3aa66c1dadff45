"""Extended thinking, prompt caching and token counting are served only by native rows."""

from __future__ import annotations

import anthropic
import pytest

HELLO = [{"role": "user", "content": "hello there"}]
THINKING = {"type": "enabled", "budget_tokens": 1024}
EPHEMERAL = {"type": "ephemeral"}
CHAT_PATH = "/v1/chat/completions"

# Every place a cache marker may sit: the request itself, a system block, a tool, a message block, and a
# block inside a tool_result.
CACHED_REQUESTS = {
    "top level": {"cache_control": EPHEMERAL, "messages": HELLO},
    "system": {
        "system": [{"type": "text", "text": "a long preamble", "cache_control": EPHEMERAL}],
        "messages": HELLO,
    },
    "tools": {
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}],
        "messages": HELLO,
    },
    "message": {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
        ]
    },
    "tool result": {
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "w", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "18 C", "cache_control": EPHEMERAL}],
                    }
                ],
            },
        ],
    },
}


def messages_body(model: str, **fields) -> dict:
    return {"model": model, "max_tokens": 2048, "messages": HELLO, **fields}


def test_a_thinking_request_on_a_mixed_model_skips_its_openai_row(claude_sdk, oai, anth) -> None:
    message = claude_sdk.messages.create(model="mixed", max_tokens=2048, messages=HELLO, thinking=THINKING)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert oai.requests == []
    assert anth.requests_to("/v1/messages")[-1].json["thinking"] == THINKING


def test_a_streamed_thinking_request_on_a_mixed_model_skips_its_openai_row(claude_sdk, oai) -> None:
    with claude_sdk.messages.stream(
        model="mixed", max_tokens=2048, messages=HELLO, thinking=THINKING
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking"
    assert oai.requests == []


@pytest.mark.parametrize("where", CACHED_REQUESTS)
def test_a_cache_control_request_on_a_mixed_model_skips_its_openai_row(http, oai, anth, where: str) -> None:
    reply = http.post("/v1/messages", json=messages_body("mixed", **CACHED_REQUESTS[where]))
    assert reply.status_code == 200, reply.text
    assert oai.requests == []
    assert len(anth.requests_to("/v1/messages")) == 1


def test_a_thinking_request_with_only_openai_rows_is_refused_in_envelope_b(claude_sdk, oai) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude_sdk.messages.create(model="gpt-translated", max_tokens=2048, messages=HELLO, thinking=THINKING)
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "extended thinking is only available on the native providers of /v1/messages; "
            "model 'gpt-translated' has none",
        },
    }
    assert oai.requests == []


@pytest.mark.parametrize("where", CACHED_REQUESTS)
def test_a_cache_control_request_with_only_openai_rows_is_refused_in_envelope_b(
    http, oai, where: str
) -> None:
    reply = http.post("/v1/messages", json=messages_body("gpt-translated", **CACHED_REQUESTS[where]))
    assert reply.status_code == 400
    body = reply.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("prompt caching is only available on the native providers")
    assert oai.requests == []


def test_disabled_thinking_may_be_translated(claude_sdk, oai) -> None:
    message = claude_sdk.messages.create(
        model="gpt-translated", max_tokens=50, messages=HELLO, thinking={"type": "disabled"}
    )
    assert message.content[0].text == "echo: hello there"
    assert "thinking" not in oai.requests_to(CHAT_PATH)[-1].json


def test_a_provider_object_that_leaves_only_openai_rows_explains_why_thinking_is_refused(http, oai) -> None:
    reply = http.post(
        "/v1/messages", json=messages_body("mixed", thinking=THINKING, provider={"only": "openai"})
    )
    assert reply.status_code == 400
    assert reply.json()["type"] == "error"
    assert "'provider' object" in reply.json()["error"]["message"]
    assert oai.requests == []


def test_provider_object_errors_stay_in_envelope_a_on_messages(http) -> None:
    reply = http.post("/v1/messages", json=messages_body("mixed", provider={"only": "nobody"}))
    assert reply.status_code == 400
    assert "type" not in reply.json()
    assert reply.json()["error"]["type"] == "invalid_request_error"


def test_tokens_of_a_mixed_model_are_counted_by_its_native_row(claude_sdk, oai, anth) -> None:
    counted = claude_sdk.messages.count_tokens(model="mixed", messages=HELLO)
    assert counted.input_tokens == 5
    assert oai.requests == []
    assert len(anth.requests_to("/v1/messages/count_tokens")) == 1


def test_counting_tokens_without_a_native_row_is_refused_in_envelope_b(claude_sdk, oai) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude_sdk.messages.count_tokens(model="gpt-translated", messages=HELLO)
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["message"] == (
        "token counting is only available on the native providers of /v1/messages/count_tokens; "
        "model 'gpt-translated' has none"
    )
    assert oai.requests == []


def test_a_block_the_translated_row_cannot_carry_goes_to_the_native_row(http, oai, anth) -> None:
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}
    reply = http.post(
        "/v1/messages",
        json={
            "model": "mixed",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": [document, {"type": "text", "text": "summarise"}]}],
        },
    )
    assert reply.status_code == 200, reply.text
    assert oai.requests_to("/v1/chat/completions") == []
    assert anth.requests_to("/v1/messages")[-1].json["messages"][0]["content"][0]["type"] == "document"


def test_a_block_no_row_can_carry_is_the_clients_400(http, oai) -> None:
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}
    reply = http.post(
        "/v1/messages",
        json={
            "model": "gpt-translated",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": [document]}],
        },
    )
    assert reply.status_code == 400
    assert reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert oai.requests_to("/v1/chat/completions") == []
