"""The official openai SDK on a model served only by Anthropic-kind rows: chat completions over Messages."""

from __future__ import annotations

import openai
import pytest

from tests.fakes import Fault
from tests.integration.messages.conftest import CLAUDE_DEFAULT_MAX_TOKENS, UPSTREAM_KEY

HELLO = [{"role": "user", "content": "hello there"}]
MESSAGES_PATH = "/v1/messages"
WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def sent_messages(anth) -> dict:
    return anth.requests_to(MESSAGES_PATH)[-1].json


def test_a_chat_completion_is_answered_through_messages(openai_sdk, anth, oai) -> None:
    reply = openai_sdk.chat.completions.create(model="claude-native", messages=HELLO)
    assert reply.id.startswith("chatcmpl-")
    assert reply.model == "claude-native"
    assert reply.choices[0].message.content == "echo: hello there"
    assert reply.choices[0].finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (5, 3, 8)
    assert oai.requests == []


def test_the_messages_request_carries_the_translated_parameters(openai_sdk, anth) -> None:
    openai_sdk.chat.completions.create(
        model="claude-native",
        messages=[{"role": "system", "content": "Be brief."}, *HELLO],
        max_tokens=40,
        temperature=0.4,
        top_p=0.9,
        stop=["STOP"],
        user="user-9",
    )
    record = anth.requests_to(MESSAGES_PATH)[-1]
    assert record.headers["x-api-key"] == UPSTREAM_KEY
    assert record.headers["anthropic-version"] == "2023-06-01"
    assert record.json == {
        "model": "claude-upstream",
        "max_tokens": 40,
        "messages": HELLO,
        "system": "Be brief.",
        "temperature": 0.4,
        "top_p": 0.9,
        "stop_sequences": ["STOP"],
        "metadata": {"user_id": "user-9"},
    }


def test_the_models_default_max_tokens_is_sent_when_the_client_sets_none(openai_sdk, anth) -> None:
    openai_sdk.chat.completions.create(model="claude-native", messages=HELLO)
    assert sent_messages(anth)["max_tokens"] == CLAUDE_DEFAULT_MAX_TOKENS


def test_a_max_tokens_cut_finishes_with_length(openai_sdk) -> None:
    reply = openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, max_completion_tokens=2)
    assert reply.choices[0].message.content == "echo: hello"
    assert reply.choices[0].finish_reason == "length"


def test_a_streamed_chat_completion_arrives_delta_by_delta(openai_sdk) -> None:
    chunks = list(openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, stream=True))
    assert all(chunk.model == "claude-native" for chunk in chunks)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "echo: hello there"
    assert chunks[-1].choices[0].finish_reason == "stop"
    # The client did not ask for usage, so no chunk without choices breaks `chunk.choices[0]` loops.
    assert all(chunk.choices for chunk in chunks)


def test_a_streamed_chat_completion_reports_usage_when_asked(openai_sdk) -> None:
    chunks = list(
        openai_sdk.chat.completions.create(
            model="claude-native", messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (5, 3)


def test_the_first_delta_reaches_the_client_while_the_upstream_is_still_streaming(openai_sdk, anth) -> None:
    anth.add_fault(MESSAGES_PATH, Fault(hold_before_last_chunk="last"))
    stream = openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, stream=True)
    chunks = iter(stream)
    texts = []
    while not texts:
        texts = [c for c in [next(chunks).choices[0].delta.content] if c]
    assert anth.wait_held("last", timeout=5)
    assert anth.active_streams == 1
    anth.release("last")
    texts += [chunk.choices[0].delta.content or "" for chunk in chunks]
    assert "".join(texts) == "echo: hello there"


def test_tool_calls_round_trip(openai_sdk, anth) -> None:
    first = openai_sdk.chat.completions.create(
        model="claude-native",
        tools=[WEATHER_FUNCTION],
        tool_choice="required",
        messages=[{"role": "user", "content": "weather in Paris?"}],
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city":"Paris"}')
    assert sent_messages(anth)["tool_choice"] == {"type": "any"}
    assert sent_messages(anth)["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather",
            "input_schema": WEATHER_FUNCTION["function"]["parameters"],
        }
    ]
    second = openai_sdk.chat.completions.create(
        model="claude-native",
        tools=[WEATHER_FUNCTION],
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18 C"},
        ],
    )
    assert second.choices[0].finish_reason == "stop"
    assert sent_messages(anth)["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": call.id, "name": "get_weather", "input": {"city": "Paris"}}
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 C"}]},
    ]


def test_parallel_tool_calls_stream_with_their_own_indexes(openai_sdk) -> None:
    stream = openai_sdk.chat.completions.create(
        model="claude-native",
        tools=[WEATHER_FUNCTION],
        stream=True,
        messages=[{"role": "user", "content": "weather in parallel please"}],
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        for part in delta.tool_calls or ():
            call = calls.setdefault(part.index, {"name": "", "arguments": ""})
            call["name"] += part.function.name or ""
            call["arguments"] += part.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert calls == {
        0: {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        1: {"name": "get_weather", "arguments": '{"city":"London"}'},
    }
    assert finish == "tool_calls"


def test_an_anthropic_style_400_comes_back_in_envelope_a(openai_sdk, anth) -> None:
    body = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"},
    }
    anth.add_fault(MESSAGES_PATH, Fault(status=400, body=body))
    with pytest.raises(openai.BadRequestError) as caught:
        openai_sdk.chat.completions.create(model="claude-native", messages=HELLO)
    assert caught.value.body == {"message": "messages: roles must alternate", "type": "invalid_request_error"}


def test_a_stream_broken_by_the_provider_ends_with_an_error_chunk(openai_sdk, anth) -> None:
    anth.add_fault(MESSAGES_PATH, Fault(disconnect_after_chunks=5))
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in openai_sdk.chat.completions.create(model="claude-native", messages=HELLO, stream=True):
            received.append(chunk)
    assert received
    assert caught.value.body["code"] == "upstream_unavailable"
