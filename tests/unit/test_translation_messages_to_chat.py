"""Golden tests: a Messages request as a chat completion request, and a chat completion as a Message."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.messages_to_chat import chat_request_of, message_of

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": WEATHER_TOOL["input_schema"],
        "description": "Weather in a city",
    },
}


def request(**fields) -> dict:
    return {
        "model": "client-model",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


# -- request -----------------------------------------------------------------------------------------


def test_a_text_request_with_a_system_string_and_sampling_parameters() -> None:
    payload = request(
        system="Be brief.",
        messages=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi!"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Tell me"}, {"type": "text", "text": "a joke"}],
            },
        ],
        temperature=0.2,
        top_p=0.9,
        stop_sequences=["END", "STOP"],
        metadata={"user_id": "user-42"},
    )
    assert chat_request_of(payload, "gpt-upstream") == {
        "model": "gpt-upstream",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "Tell me\na joke"},
        ],
        "max_completion_tokens": 100,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["END", "STOP"],
        "user": "user-42",
    }


def test_system_text_blocks_become_one_system_message() -> None:
    system = [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in French."}]
    chat = chat_request_of(request(system=system), "m")
    assert chat["messages"][0] == {"role": "system", "content": "You are terse.\nAnswer in French."}


def test_streaming_asks_the_upstream_for_usage() -> None:
    chat = chat_request_of(request(stream=True), "m")
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}


def test_a_base64_image_becomes_a_data_url_and_a_url_image_stays_a_url() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "text", "text": "What is in these?"},
    ]
    chat = chat_request_of(request(messages=[{"role": "user", "content": content}]), "m")
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                {"type": "text", "text": "What is in these?"},
            ],
        }
    ]


def test_tools_become_functions_and_a_tool_conversation_keeps_its_call_ids() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "London"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "rain"}, {"type": "text", "text": "12 C"}],
                },
                {"type": "text", "text": "Summarise."},
            ],
        },
    ]
    chat = chat_request_of(request(messages=messages, tools=[WEATHER_TOOL]), "m")
    assert chat["tools"] == [WEATHER_FUNCTION]
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": "Checking.",
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
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "rain\n12 C"},
        {"role": "user", "content": "Summarise."},
    ]


def test_an_assistant_turn_of_tool_calls_only_has_null_content() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
    ]
    chat = chat_request_of(request(messages=messages), "m")
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "t", "content": ""}


def test_a_failed_tool_result_tells_the_model_it_failed() -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True}],
        }
    ]
    chat = chat_request_of(request(messages=messages), "m")
    assert chat["messages"] == [{"role": "tool", "tool_call_id": "t", "content": "Error: boom"}]


def test_an_image_in_a_tool_result_moves_to_the_user_message_after_the_tool_message() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/chart.png"}}
    messages = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [image]}]},
    ]
    chat = chat_request_of(request(messages=messages), "m")
    assert chat["messages"] == [
        {"role": "tool", "tool_call_id": "t", "content": ""},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.com/chart.png"}}],
        },
    ]


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
def test_tool_choice(tool_choice: dict, expected: object) -> None:
    chat = chat_request_of(request(tools=[WEATHER_TOOL], tool_choice=tool_choice), "m")
    assert chat["tool_choice"] == expected
    assert "parallel_tool_calls" not in chat


def test_disabling_parallel_tool_use_turns_off_parallel_tool_calls() -> None:
    choice = {"type": "auto", "disable_parallel_tool_use": True}
    chat = chat_request_of(request(tools=[WEATHER_TOOL], tool_choice=choice), "m")
    assert chat["tool_choice"] == "auto"
    assert chat["parallel_tool_calls"] is False


def test_a_tool_without_input_schema_gets_an_empty_object_schema() -> None:
    chat = chat_request_of(request(tools=[{"name": "now"}]), "m")
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
    ]


def test_thinking_blocks_of_an_earlier_turn_are_left_out() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Hello"},
            ],
        },
        {"role": "user", "content": "again"},
    ]
    assert chat_request_of(request(messages=messages), "m")["messages"][1] == {
        "role": "assistant",
        "content": "Hello",
    }


def test_a_server_tool_cannot_be_translated() -> None:
    with pytest.raises(InvalidRequest, match="web_search_20250305"):
        chat_request_of(request(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "m")


def test_a_document_block_cannot_be_translated() -> None:
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    with pytest.raises(InvalidRequest, match="document"):
        chat_request_of(request(messages=[{"role": "user", "content": [document]}]), "m")


# -- answer ------------------------------------------------------------------------------------------


def completion(message: dict, finish_reason: str = "stop", **choice_fields) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-upstream-2024",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, **choice_fields}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }


def without_id(message: dict) -> dict:
    assert message["id"].startswith("msg_") and len(message["id"]) > 10
    return {k: v for k, v in message.items() if k != "id"}


def test_a_text_answer_becomes_a_message_named_after_the_client_model() -> None:
    answer = message_of(completion({"role": "assistant", "content": "Hello there"}), "client-model")
    assert without_id(answer) == {
        "type": "message",
        "role": "assistant",
        "model": "client-model",
        "content": [{"type": "text", "text": "Hello there"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def test_parallel_tool_calls_become_tool_use_blocks_with_parsed_input() -> None:
    message = {
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
                "function": {"name": "get_weather", "arguments": '{"city": "London"}'},
            },
        ],
    }
    answer = message_of(completion(message, "tool_calls"), "m")
    assert answer["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "London"}},
    ]
    assert answer["stop_reason"] == "tool_use"


def test_text_before_a_tool_call_stays_first() -> None:
    message = {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    answer = message_of(completion(message, "tool_calls"), "m")
    assert [block["type"] for block in answer["content"]] == ["text", "tool_use"]


def test_unparseable_tool_arguments_give_an_empty_input() -> None:
    message = {
        "role": "assistant",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}],
    }
    assert message_of(completion(message, "tool_calls"), "m")["content"][0]["input"] == {}


@pytest.mark.parametrize(
    ("finish_reason", "choice_fields", "stop_reason", "stop_sequence"),
    [
        ("stop", {}, "end_turn", None),
        ("length", {}, "max_tokens", None),
        ("tool_calls", {}, "tool_use", None),
        ("content_filter", {}, "refusal", None),
        # vLLM names the stop string that matched; SGLang calls it matched_stop.
        ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),
        ("stop", {"matched_stop": "###"}, "stop_sequence", "###"),
        # A token id (vLLM's EOS) is not a stop sequence.
        ("stop", {"stop_reason": 128009}, "end_turn", None),
    ],
)
def test_stop_reasons(
    finish_reason: str, choice_fields: dict, stop_reason: str, stop_sequence: str | None
) -> None:
    answer = message_of(
        completion({"role": "assistant", "content": "x"}, finish_reason, **choice_fields), "m"
    )
    assert (answer["stop_reason"], answer["stop_sequence"]) == (stop_reason, stop_sequence)


def test_cached_prompt_tokens_are_reported_apart_from_input_tokens() -> None:
    body = completion({"role": "assistant", "content": "x"})
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 8}
    assert message_of(body, "m")["usage"] == {
        "input_tokens": 4,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 8,
    }


def test_a_refusal_is_reported_as_text() -> None:
    answer = message_of(
        completion({"role": "assistant", "content": None, "refusal": "I can't."}, "stop"), "m"
    )
    assert answer["content"] == [{"type": "text", "text": "I can't."}]
