"""Structured output across the two families: openai's `chat.completions.parse` on a model served by
Anthropic-kind rows (the schema goes as a forced tool, its call comes back as the JSON text), and the
anthropic SDK's `messages.parse` / a tool-forced schema on a model served by OpenAI-kind rows."""

from __future__ import annotations

import openai
import pydantic
import pytest

MESSAGES_PATH = "/v1/messages"
CHAT_PATH = "/v1/chat/completions"
PROMPT = [{"role": "user", "content": "Ada Lovelace was born in 1815"}]
WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class Person(pydantic.BaseModel):
    name: str
    words: int
    tags: list[str]


PERSON_SCHEMA = Person.model_json_schema()
# What the echo model answers for PROMPT: strings are the prompt, integers its word count.
ADA = Person(name="Ada Lovelace was born in 1815", words=6, tags=["Ada Lovelace was born in 1815"])


def sent_messages(anth) -> dict:
    return anth.requests_to(MESSAGES_PATH)[-1].json


def test_chat_parse_on_anthropic_rows_sends_the_schema_as_a_forced_tool(openai_sdk, anth) -> None:
    reply = openai_sdk.chat.completions.parse(model="claude-native", messages=PROMPT, response_format=Person)
    person = reply.choices[0].message.parsed
    assert person == ADA
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.tool_calls in (None, [])
    sent = sent_messages(anth)
    [tool] = sent["tools"]
    assert tool["name"] == "json_answer"
    assert tool["input_schema"]["properties"].keys() == {"name", "words", "tags"}
    assert tool["input_schema"]["additionalProperties"] is False  # the SDK's strict schema, as sent
    assert sent["tool_choice"] == {"type": "tool", "name": "json_answer"}


def test_chat_parse_streamed_on_anthropic_rows_streams_the_json_as_content(openai_sdk) -> None:
    with openai_sdk.chat.completions.stream(
        model="claude-native", messages=PROMPT, response_format=Person
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(deltas) > 1  # the tool's argument fragments arrive as content deltas, not at the end
    assert final.choices[0].message.parsed == ADA
    assert final.choices[0].finish_reason == "stop"


def test_json_object_on_anthropic_rows_answers_a_json_object(openai_sdk, anth) -> None:
    reply = openai_sdk.chat.completions.create(
        model="claude-native", messages=PROMPT, response_format={"type": "json_object"}
    )
    assert isinstance(pydantic.TypeAdapter(dict).validate_json(reply.choices[0].message.content), dict)
    assert sent_messages(anth)["tools"][0]["input_schema"] == {"type": "object"}


def test_a_plain_text_response_format_sends_no_tool(openai_sdk, anth) -> None:
    reply = openai_sdk.chat.completions.create(
        model="claude-native", messages=PROMPT, response_format={"type": "text"}
    )
    assert reply.choices[0].message.content == "echo: Ada Lovelace was born in 1815"
    assert "tools" not in sent_messages(anth)


def test_with_the_clients_tools_the_model_must_call_one_and_theirs_stay_tool_calls(openai_sdk, anth) -> None:
    reply = openai_sdk.chat.completions.create(
        model="claude-native",
        messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[WEATHER_FUNCTION],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}},
    )
    sent = sent_messages(anth)
    assert [tool["name"] for tool in sent["tools"]] == ["get_weather", "json_answer"]
    assert sent["tool_choice"] == {"type": "any"}
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_a_client_tool_named_like_the_answer_tool_is_refused_naming_it(openai_sdk, anth) -> None:
    tool = {"type": "function", "function": {"name": "json_answer", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(
            model="claude-native", messages=PROMPT, tools=[tool], response_format={"type": "json_object"}
        )
    assert "json_answer" in refused.value.body["message"]
    assert refused.value.body["type"] == "invalid_request_error"
    assert anth.requests_to(MESSAGES_PATH) == []


def test_a_schema_that_is_not_an_object_is_refused(openai_sdk, anth) -> None:
    schema = {"name": "numbers", "schema": {"type": "array", "items": {"type": "integer"}}}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_sdk.chat.completions.create(
            model="claude-native",
            messages=PROMPT,
            response_format={"type": "json_schema", "json_schema": schema},
        )
    assert refused.value.body["message"] == (
        "'response_format' cannot be sent to provider 'claude': 'json_schema.schema' must describe an object"
    )
    assert anth.requests_to(MESSAGES_PATH) == []


def test_messages_parse_on_openai_rows_asks_for_a_strict_json_schema(claude_sdk, oai) -> None:
    reply = claude_sdk.messages.parse(
        model="gpt-translated", max_tokens=200, messages=PROMPT, output_format=Person
    )
    assert reply.parsed_output == ADA
    response_format = oai.requests_to(CHAT_PATH)[-1].json["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"]["properties"].keys() == {"name", "words", "tags"}


def test_messages_parse_streamed_on_openai_rows(claude_sdk) -> None:
    with claude_sdk.messages.stream(
        model="gpt-translated", max_tokens=200, messages=PROMPT, output_format=Person
    ) as stream:
        final = stream.get_final_message()
    assert final.parsed_output == ADA


def test_a_tool_forced_schema_from_the_anthropic_sdk_on_openai_rows(claude_sdk, oai) -> None:
    tool = {"name": "get_weather", "input_schema": WEATHER_FUNCTION["function"]["parameters"]}
    reply = claude_sdk.messages.create(
        model="gpt-translated",
        max_tokens=200,
        messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert oai.requests_to(CHAT_PATH)[-1].json["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    [use] = [block for block in reply.content if block.type == "tool_use"]
    assert use.input == {"city": "Paris"}
    assert reply.stop_reason == "tool_use"


def test_an_output_format_other_than_json_schema_is_refused_in_envelope_b(http, oai) -> None:
    answer = http.post(
        MESSAGES_PATH,
        json={
            "model": "gpt-translated",
            "max_tokens": 10,
            "messages": PROMPT,
            "output_config": {"format": {"type": "xml"}},
        },
    )
    assert answer.status_code == 400
    assert answer.json()["type"] == "error"
    assert "output_config.format" in answer.json()["error"]["message"]
    assert oai.requests_to(CHAT_PATH) == []


def test_the_anthropic_sdk_keeps_working_against_native_rows_with_output_config(claude_sdk, anth) -> None:
    claude_sdk.messages.create(
        model="claude-native",
        max_tokens=50,
        messages=PROMPT,
        output_config={"format": {"type": "json_schema", "schema": Person.model_json_schema()}},
    )
    assert sent_messages(anth)["output_config"]["format"]["type"] == "json_schema"
