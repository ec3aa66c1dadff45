"""Golden tests: a chat completion request as a Messages request, and a Message as a chat completion."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.chat_to_messages import completion_of, messages_request_of

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER_FUNCTION = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather in a city", "parameters": SCHEMA},
}
WEATHER_TOOL = {"name": "get_weather", "description": "Weather in a city", "input_schema": SCHEMA}


def chat(**fields) -> dict:
    return {"model": "client-model", "messages": [{"role": "user", "content": "hi"}], **fields}


# -- request -----------------------------------------------------------------------------------------


def test_a_text_request_with_system_messages_and_sampling_parameters() -> None:
    payload = chat(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Bonjour"},
            {"role": "user", "content": [{"type": "text", "text": "Again"}]},
        ],
        max_tokens=50,
        temperature=0.3,
        top_p=0.8,
        stop="END",
        user="user-42",
    )
    assert messages_request_of(payload, "claude-upstream", 4096) == {
        "model": "claude-upstream",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Bonjour"},
            {"role": "user", "content": "Again"},
        ],
        "system": "Be brief.\nAnswer in French.",
        "temperature": 0.3,
        "top_p": 0.8,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "user-42"},
    }


def test_the_models_default_max_tokens_fills_in_when_the_client_sets_none() -> None:
    assert messages_request_of(chat(), "m", 1234)["max_tokens"] == 1234


def test_max_completion_tokens_wins_over_the_default() -> None:
    assert messages_request_of(chat(max_completion_tokens=77), "m", 1234)["max_tokens"] == 77


def test_a_temperature_above_the_messages_range_is_clamped() -> None:
    assert messages_request_of(chat(temperature=1.7), "m", 10)["temperature"] == 1.0


def test_streaming_is_passed_on() -> None:
    assert (
        messages_request_of(chat(stream=True, stream_options={"include_usage": True}), "m", 10)["stream"]
        is True
    )


def test_image_parts_become_image_blocks() -> None:
    content = [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
    ]
    request = messages_request_of(chat(messages=[{"role": "user", "content": content}]), "m", 10)
    assert request["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}},
            ],
        }
    ]


def test_a_tool_conversation_becomes_tool_use_and_merged_tool_result_turns() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"London"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "12 C"}]},
        {"role": "user", "content": "Summarise."},
    ]
    request = messages_request_of(chat(messages=messages, tools=[WEATHER_FUNCTION]), "m", 10)
    assert request["tools"] == [WEATHER_TOOL]
    assert request["messages"] == [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "London"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "18 C"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "12 C"},
                {"type": "text", "text": "Summarise."},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"type": "tool", "name": "get_weather"}),
    ],
)
def test_tool_choice(tool_choice: object, expected: dict) -> None:
    request = messages_request_of(chat(tools=[WEATHER_FUNCTION], tool_choice=tool_choice), "m", 10)
    assert request["tool_choice"] == expected


def test_parallel_tool_calls_off_disables_parallel_tool_use() -> None:
    request = messages_request_of(chat(tools=[WEATHER_FUNCTION], parallel_tool_calls=False), "m", 10)
    assert request["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_more_than_one_choice_cannot_be_served() -> None:
    with pytest.raises(InvalidRequest, match="'n'"):
        messages_request_of(chat(n=2), "m", 10)


def test_audio_input_cannot_be_translated() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(InvalidRequest, match="input_audio"):
        messages_request_of(chat(messages=[{"role": "user", "content": [audio]}]), "m", 10)


# -- answer ------------------------------------------------------------------------------------------


def message(content: list, stop_reason: str = "end_turn", **usage) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-upstream",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3, **usage},
    }


def normalised(completion: dict) -> dict:
    assert completion.pop("id").startswith("chatcmpl-")
    assert isinstance(completion.pop("created"), int)
    return completion


def test_a_text_message_becomes_a_chat_completion_named_after_the_client_model() -> None:
    answer = completion_of(message([{"type": "text", "text": "Hello there"}]), "client-model")
    assert normalised(answer) == {
        "object": "chat.completion",
        "model": "client-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "total_tokens": 13,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


def test_tool_use_blocks_become_tool_calls_and_thinking_is_reasoning_content() -> None:
    content = [
        {"type": "thinking", "thinking": "plan", "signature": "sig"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "London"}},
    ]
    choice = completion_of(message(content, "tool_use"), "m")["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "reasoning_content": "plan",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            },
            {
                "id": "toolu_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"London"}'},
            },
        ],
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
    ],
)
def test_finish_reasons(stop_reason: str, finish_reason: str) -> None:
    answer = completion_of(message([{"type": "text", "text": "x"}], stop_reason), "m")
    assert answer["choices"][0]["finish_reason"] == finish_reason


def test_cache_reads_and_writes_count_as_prompt_tokens_and_reads_as_cached() -> None:
    body = message(
        [{"type": "text", "text": "x"}], cache_read_input_tokens=100, cache_creation_input_tokens=20
    )
    assert completion_of(body, "m")["usage"] == {
        "prompt_tokens": 130,
        "completion_tokens": 3,
        "total_tokens": 133,
        "prompt_tokens_details": {"cached_tokens": 100},
    }
