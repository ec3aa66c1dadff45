"""Answers on /v1/messages (and the model list asked for in the Anthropic style) carry the request id as
the anthropic SDK reads it (`request-id`) beside the gateway's own `x-request-id`, on success and on error;
OpenAI-style answers keep `x-request-id` alone.
"""

from __future__ import annotations

import anthropic
import pytest

HELLO = [{"role": "user", "content": "hello there"}]


def test_a_message_carries_its_request_id_for_the_anthropic_sdk(claude_sdk) -> None:
    raw = claude_sdk.messages.with_raw_response.create(model="claude-native", max_tokens=50, messages=HELLO)
    message = raw.parse()

    assert raw.headers["request-id"] == raw.headers["x-request-id"]
    assert message._request_id == raw.headers["x-request-id"]


def test_a_streamed_message_carries_its_request_id(claude_sdk) -> None:
    with claude_sdk.messages.stream(model="claude-native", max_tokens=50, messages=HELLO) as stream:
        headers = stream.response.headers
        "".join(stream.text_stream)

    assert headers["request-id"] == headers["x-request-id"]


def test_a_translated_message_carries_its_request_id(claude_sdk) -> None:
    message = claude_sdk.messages.create(model="gpt-translated", max_tokens=50, messages=HELLO)
    assert message._request_id and message._request_id.startswith("req_")


def test_an_error_answer_carries_its_request_id_for_the_anthropic_sdk(claude_sdk) -> None:
    with pytest.raises(anthropic.NotFoundError) as refused:
        claude_sdk.messages.create(model="no-such-model", max_tokens=50, messages=HELLO)

    error = refused.value
    assert error.request_id == error.response.headers["x-request-id"]
    assert error.request_id.startswith("req_")


def test_a_client_chosen_request_id_comes_back_under_both_names(http) -> None:
    reply = http.post(
        "/v1/messages",
        json={"model": "claude-native", "max_tokens": 50, "messages": HELLO},
        headers={"x-request-id": "client-chosen-0001"},
    )
    assert reply.status_code == 200, reply.text
    assert (reply.headers["x-request-id"], reply.headers["request-id"]) == ("client-chosen-0001",) * 2


def test_the_model_list_in_the_anthropic_style_carries_its_request_id(claude_sdk) -> None:
    raw = claude_sdk.models.with_raw_response.list()
    assert raw.headers["request-id"] == raw.headers["x-request-id"]


def test_openai_style_routes_answer_with_x_request_id_alone(openai_sdk) -> None:
    raw = openai_sdk.chat.completions.with_raw_response.create(model="chat-only", messages=HELLO)
    assert raw.headers["x-request-id"].startswith("req_")
    assert "request-id" not in raw.headers
