"""The Responses API on a model served by Anthropic-kind rows: translated to chat, then to Messages, and the
answer back as a Response. The official openai SDK's `responses.create`, `responses.parse` and
`responses.stream` work unchanged; what a translated row cannot carry is a 400 naming the field and the
provider, and nothing reaches the provider."""

from __future__ import annotations

import openai
import pydantic
import pytest

from tests.fakes import Fault

MESSAGES_PATH = "/v1/messages"
PROMPT = "Ada Lovelace was born in 1815"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


class Person(pydantic.BaseModel):
    name: str
    words: int
    tags: list[str]


# What the fake answers for PROMPT through the forced answer tool: strings are the prompt, integers its
# word count.
ADA = Person(name=PROMPT, words=6, tags=[PROMPT])


def sent(anth) -> dict:
    return anth.requests_to(MESSAGES_PATH)[-1].json


def message_of(error: openai.APIStatusError) -> str:
    body = error.body
    assert isinstance(body, dict)
    return str(body["message"])


def refusal_of(openai_sdk: openai.OpenAI, **fields) -> str:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.responses.create(model="claude-native", input=PROMPT, **fields)
    return message_of(refused.value)


# -- refusals first --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("store", True),
        ("background", True),
        ("conversation", "conv_abc123"),
        ("include", ["reasoning.encrypted_content"]),
        ("truncation", "auto"),
        ("max_tool_calls", 2),
        ("prompt_cache_key", "k"),
        ("prompt", {"id": "pmpt_1"}),
    ],
)
def test_a_field_a_translated_row_cannot_carry_is_refused_naming_it_and_the_provider(
    openai_sdk, anth, field: str, value
) -> None:
    message = refusal_of(openai_sdk, extra_body={field: value})
    assert message.startswith(f"'{field}' cannot be sent to provider 'claude'")
    assert anth.requests_to(MESSAGES_PATH) == []


def test_logprobs_asked_through_include_are_refused_by_the_messages_table(openai_sdk, anth) -> None:
    message = refusal_of(openai_sdk, include=["message.output_text.logprobs"], top_logprobs=3)
    assert message.startswith("'logprobs' cannot be sent to provider 'claude'")
    assert anth.requests_to(MESSAGES_PATH) == []


def test_a_built_in_tool_is_refused_naming_it_and_the_provider(openai_sdk, anth) -> None:
    message = refusal_of(openai_sdk, tools=[{"type": "web_search"}])
    assert message.startswith("'tools' cannot be sent to provider 'claude'")
    assert "'web_search'" in message
    assert anth.requests_to(MESSAGES_PATH) == []


def test_a_tool_choice_of_a_built_in_tool_is_refused(openai_sdk, anth) -> None:
    message = refusal_of(openai_sdk, tools=[WEATHER_TOOL], tool_choice={"type": "file_search"})
    assert message.startswith("'tool_choice' cannot be sent to provider 'claude'")


def test_an_input_item_that_needs_stored_state_is_refused(openai_sdk, anth) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.responses.create(
            model="claude-native", input=[{"type": "item_reference", "id": "msg_123"}]
        )
    assert "'item_reference'" in message_of(refused.value)
    assert anth.requests_to(MESSAGES_PATH) == []


def test_a_field_the_chat_table_refuses_is_refused_after_translation(openai_sdk, anth) -> None:
    message = refusal_of(openai_sdk, metadata={"team": "a"})
    assert message.startswith("'metadata' cannot be sent to provider 'claude'")


def test_an_answer_that_is_not_a_message_is_a_502_not_a_500(openai_sdk, anth) -> None:
    anth.add_fault(MESSAGES_PATH, Fault(body={"type": "message", "content": "not blocks"}, status=200))
    with pytest.raises(openai.APIStatusError) as failed:
        openai_sdk.responses.create(model="claude-native", input=PROMPT)
    assert failed.value.status_code == 502


def test_a_stream_that_breaks_off_ends_with_an_error_the_sdk_raises(openai_sdk, anth) -> None:
    anth.add_fault(MESSAGES_PATH, Fault(disconnect_after_chunks=3))
    with pytest.raises(openai.APIError, match="unavailable"):
        with openai_sdk.responses.stream(model="claude-native", input=PROMPT) as stream:
            for _ in stream:
                pass


def test_a_translated_response_is_stored_nowhere_so_it_cannot_be_fetched(openai_sdk) -> None:
    response = openai_sdk.responses.create(model="claude-native", input=PROMPT)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        openai_sdk.responses.retrieve(response.id)


# -- requests and answers --------------------------------------------------------------------------------


def test_plain_text_with_instructions_and_its_usage(openai_sdk, anth) -> None:
    response = openai_sdk.responses.create(
        model="claude-native", input=PROMPT, instructions="Be brief.", max_output_tokens=50, temperature=0.5
    )
    assert response.output_text == f"echo: {PROMPT}"
    assert response.status == "completed"
    body = sent(anth)
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": PROMPT}]
    assert (body["max_tokens"], body["temperature"]) == (50, 0.5)
    assert response.usage.output_tokens == 7
    assert response.usage.input_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + 7


def test_max_output_tokens_reached_is_an_incomplete_response(openai_sdk) -> None:
    response = openai_sdk.responses.create(
        model="claude-native", input="one two three four", max_output_tokens=2
    )
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"


def test_a_streamed_answer_cut_by_max_output_tokens_ends_with_response_incomplete(openai_sdk) -> None:
    events = list(
        openai_sdk.responses.create(
            model="claude-native", input="one two three four", max_output_tokens=2, stream=True
        )
    )
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text == "echo: one"
    assert [event.sequence_number for event in events] == list(range(len(events)))


def test_responses_parse_sends_the_schema_as_a_forced_tool_and_reads_the_answer(openai_sdk, anth) -> None:
    response = openai_sdk.responses.parse(model="claude-native", input=PROMPT, text_format=Person)
    assert response.output_parsed == ADA
    body = sent(anth)
    assert [tool["name"] for tool in body["tools"]] == ["json_answer"]
    assert body["tools"][0]["input_schema"]["properties"].keys() == {"name", "words", "tags"}
    assert body["tool_choice"] == {"type": "tool", "name": "json_answer"}
    assert [item.type for item in response.output] == ["message"]


def test_responses_stream_with_a_text_format_streams_the_json_and_parses_it(openai_sdk) -> None:
    with openai_sdk.responses.stream(model="claude-native", input=PROMPT, text_format=Person) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds.count("response.output_text.delta") > 1  # the JSON arrives in pieces, not at the end
    assert kinds[-1] == "response.completed"
    for kind in ("response.output_item.added", "response.content_part.added", "response.output_text.done"):
        assert kind in kinds
    assert final.output_parsed == ADA
    assert final.usage is not None and final.usage.output_tokens > 0


def test_json_object_format_answers_a_json_object(openai_sdk, anth) -> None:
    response = openai_sdk.responses.create(
        model="claude-native", input=PROMPT, text={"format": {"type": "json_object"}}
    )
    assert isinstance(pydantic.TypeAdapter(dict).validate_json(response.output_text), dict)
    assert sent(anth)["tools"][0]["input_schema"] == {"type": "object"}


def test_a_function_call_and_its_output_go_round_trip(openai_sdk, anth) -> None:
    first = openai_sdk.responses.create(
        model="claude-native", input="weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required"
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}')
    assert sent(anth)["tool_choice"] == {"type": "any"}
    assert sent(anth)["tools"][0]["input_schema"] == WEATHER_TOOL["parameters"]
    second = openai_sdk.responses.create(
        model="claude-native",
        input=[
            {"role": "user", "content": "weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert second.output_text == "echo: sunny"
    turns = sent(anth)["messages"]
    assert turns[1]["content"][0] == {
        "type": "tool_use", "id": call.call_id, "name": "get_weather", "input": {"city": "Paris"}
    }  # fmt: skip
    assert turns[2]["content"][0]["type"] == "tool_result"
    assert turns[2]["content"][0]["tool_use_id"] == call.call_id


def test_streamed_function_calls_arrive_as_argument_deltas(openai_sdk) -> None:
    with openai_sdk.responses.stream(
        model="claude-native", input="parallel weather please", tools=[WEATHER_TOOL]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    calls = [item for item in final.output if item.type == "function_call"]
    assert [call.arguments for call in calls] == ['{"city":"Paris"}', '{"city":"London"}']


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ({"type": "function", "name": "get_weather"}, None, {"type": "tool", "name": "get_weather"}),
    ],
)
def test_each_tool_choice_variant_and_parallel_tool_calls_reach_messages(
    openai_sdk, anth, choice, parallel, expected
) -> None:
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    openai_sdk.responses.create(
        model="claude-native", input="hello", tools=[WEATHER_TOOL], tool_choice=choice, **extra
    )
    assert sent(anth)["tool_choice"] == expected


def test_reasoning_effort_is_a_thinking_budget_and_comes_back_as_a_reasoning_item(openai_sdk, anth) -> None:
    response = openai_sdk.responses.create(
        model="claude-native", input="hello there", reasoning={"effort": "medium"}, max_output_tokens=9000
    )
    assert sent(anth)["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    reasoning, message = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.summary[0].text == "Thinking about: hello there"
    assert message.content[0].text == "echo: hello there"


def test_streamed_reasoning_arrives_as_summary_deltas(openai_sdk) -> None:
    with openai_sdk.responses.stream(
        model="claude-native", input="hello there", reasoning={"effort": "low"}
    ) as stream:
        summary = "".join(e.delta for e in stream if e.type == "response.reasoning_summary_text.delta")
        final = stream.get_final_response()
    assert summary == "Thinking about: hello there"
    assert final.output_text == "echo: hello there"


def test_images_by_url_and_inline_reach_messages_as_sources(openai_sdk, anth) -> None:
    png = "data:image/png;base64,iVBORw0KGgo="
    openai_sdk.responses.create(
        model="claude-native",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "compare"},
                    {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
                    {"type": "input_image", "image_url": png, "detail": "auto"},
                ],
            }
        ],
    )
    blocks = sent(anth)["messages"][0]["content"]
    assert blocks[1]["source"] == {"type": "url", "url": "https://example.com/a.png"}
    assert blocks[2]["source"] == {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


@pytest.mark.parametrize(
    "body",
    [
        {"input": 5},
        {"input": []},
        {"input": [5]},
        {"input": [{"role": "robot", "content": "hi"}]},
        {"input": [{"role": "user", "content": 5}]},
        {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
        {"input": [{"role": "user", "content": [7]}]},
        {"input": [{"type": "function_call", "name": "f"}]},
        {"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]},
        {"input": "hi", "tools": "x"},
        {"input": "hi", "tools": [5]},
        {"input": "hi", "tool_choice": 5},
        {"input": "hi", "text": "x"},
        {"input": "hi", "text": {"format": {"type": "xml"}}},
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "n", "schema": 5}}},
        {"input": "hi", "reasoning": "x"},
        {"input": "hi", "instructions": 5},
    ],
)
def test_hostile_input_is_a_clear_400_never_a_500(openai_sdk, anth, body: dict) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.responses.create(model="claude-native", **body)
    assert refused.value.status_code == 400
    assert "Traceback" not in message_of(refused.value)
    assert anth.requests_to(MESSAGES_PATH) == []
