"""The official anthropic SDK on a model served only by OpenAI-kind rows: Messages over chat completions."""

from __future__ import annotations

import base64

from tests.fakes import Fault
from tests.integration.messages.conftest import UPSTREAM_KEY

HELLO = [{"role": "user", "content": "hello there"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CHAT_PATH = "/v1/chat/completions"


def sent_chat(oai) -> dict:
    return oai.requests_to(CHAT_PATH)[-1].json


def test_a_message_is_answered_through_chat_completions(claude_sdk, oai, anth) -> None:
    message = claude_sdk.messages.create(model="gpt-translated", max_tokens=50, messages=HELLO)
    assert message.id.startswith("msg_")
    assert message.model == "gpt-translated"
    assert [(block.type, block.text) for block in message.content] == [("text", "echo: hello there")]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 3)
    assert anth.requests == []


def test_the_chat_request_carries_the_translated_parameters(claude_sdk, oai) -> None:
    claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=50,
        messages=HELLO,
        system="Be brief.",
        extra_body={"temperature": 0.5, "top_p": 0.9},
        stop_sequences=["STOP"],
        metadata={"user_id": "user-7"},
    )
    record = oai.requests_to(CHAT_PATH)[-1]
    assert record.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert record.json == {
        "model": "gpt-upstream",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}],
        "max_completion_tokens": 50,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["STOP"],
        "user": "user-7",
    }


def test_a_max_tokens_cut_is_reported_as_max_tokens(claude_sdk) -> None:
    message = claude_sdk.messages.create(model="gpt-translated", max_tokens=2, messages=HELLO)
    assert message.content[0].text == "echo: hello"
    assert message.stop_reason == "max_tokens"


def test_a_stop_sequence_cut_that_the_provider_does_not_name_is_an_end_turn(claude_sdk, oai) -> None:
    message = claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=50,
        stop_sequences=["END"],
        messages=[{"role": "user", "content": "a END b"}],
    )
    assert message.content[0].text == "echo: a "
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    assert sent_chat(oai)["stop"] == ["END"]


def test_an_image_reaches_the_provider_as_a_data_url(claude_sdk, oai) -> None:
    data = base64.b64encode(b"\x89PNG fake image").decode()
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "text", "text": "describe"},
    ]
    message = claude_sdk.messages.create(
        model="gpt-translated", max_tokens=50, messages=[{"role": "user", "content": content}]
    )
    assert message.content[0].text == "echo: describe"
    parts = sent_chat(oai)["messages"][0]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def test_the_sdk_stream_helpers_work_unchanged(claude_sdk, oai) -> None:
    with claude_sdk.messages.stream(model="gpt-translated", max_tokens=50, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "echo: hello there"
    assert final.model == "gpt-translated"
    assert final.content[0].text == "echo: hello there"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (5, 3)
    assert sent_chat(oai)["stream_options"] == {"include_usage": True}


def test_the_raw_stream_is_a_well_formed_messages_event_sequence(http) -> None:
    payload = {"model": "gpt-translated", "max_tokens": 50, "messages": HELLO, "stream": True}
    with http.stream("POST", "/v1/messages", json=payload) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        raw = reply.read().decode()
    names = [line[7:] for line in raw.splitlines() if line.startswith("event: ")]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_the_first_delta_reaches_the_client_while_the_upstream_is_still_streaming(claude_sdk, oai) -> None:
    oai.add_fault(CHAT_PATH, Fault(hold_before_last_chunk="last"))
    with claude_sdk.messages.stream(model="gpt-translated", max_tokens=50, messages=HELLO) as stream:
        pieces = iter(stream.text_stream)
        first = next(pieces)
        # The upstream is parked before its final chunks: nothing it sends after this point was needed.
        assert oai.wait_held("last", timeout=5)
        assert oai.active_streams == 1
        assert first == "echo:"
        oai.release("last")
        rest = "".join(pieces)
        final = stream.get_final_message()
    assert first + rest == "echo: hello there"
    assert final.stop_reason == "end_turn"


def test_a_tool_call_becomes_tool_use_with_parsed_input(claude_sdk, oai) -> None:
    message = claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather in Paris?"}],
    )
    assert message.stop_reason == "tool_use"
    [call] = message.content
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"city": "Paris"})
    sent = sent_chat(oai)
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER_TOOL["input_schema"],
                "description": "Current weather",
            },
        }
    ]
    assert sent["tool_choice"] == "required"


def test_a_tool_result_is_sent_back_as_a_tool_message(claude_sdk, oai) -> None:
    first = claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "weather in Paris?"}],
    )
    call = first.content[0]
    second = claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": [{"type": "text", "text": "18 C"}],
                    },
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    messages = sent_chat(oai)["messages"]
    assert messages[1]["tool_calls"][0]["id"] == call.id
    assert messages[2] == {"role": "tool", "tool_call_id": call.id, "content": "18 C"}


def test_disabling_parallel_tool_use_reaches_the_provider(claude_sdk, oai) -> None:
    claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=HELLO,
    )
    assert sent_chat(oai)["parallel_tool_calls"] is False


def test_parallel_tool_calls_stream_as_several_tool_use_blocks(claude_sdk) -> None:
    seen_json = []
    with claude_sdk.messages.stream(
        model="gpt-translated",
        max_tokens=100,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "weather in parallel please"}],
    ) as stream:
        for event in stream:
            if event.type == "input_json":
                seen_json.append(event.partial_json)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [
        ("tool_use", "get_weather", {"city": "Paris"}),
        ("tool_use", "get_weather", {"city": "London"}),
    ]
    # The provider cut the arguments into fragments; each came through as its own input_json_delta.
    assert len(seen_json) > 2


def test_a_mixed_model_without_native_only_features_uses_its_first_row(claude_sdk, oai, anth) -> None:
    message = claude_sdk.messages.create(model="mixed", max_tokens=50, messages=HELLO)
    assert message.model == "mixed"
    assert len(oai.requests_to(CHAT_PATH)) == 1
    assert anth.requests == []
