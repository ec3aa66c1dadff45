"""The field matrix's rows for fields inside the top-level ones (`RouteMatrix.sub_fields`): each
`tool_choice` variant, `tools[].function.strict` and `response_format.json_schema.strict`, checked against
what each route's request builder really sends."""

from __future__ import annotations

from typing import Any

import pytest

from modelgate.proxy.translation.chat_to_messages import messages_request_of
from modelgate.proxy.translation.field_matrix import MATRICES
from modelgate.proxy.translation.field_rules import NOT_SENT, TRANSLATED, FieldRefused
from modelgate.proxy.translation.responses_to_chat import chat_request_of as chat_of_responses
from modelgate.proxy.upstream.dialects.bedrock_converse import chat_to_converse
from modelgate.proxy.upstream.dialects.gemini_format import gemini_request

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PROMPT = [{"role": "user", "content": "weather?"}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
}
CHAT_ROUTES = ("chat→messages", "chat→converse", "chat→gemini")
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def build(route: str, **fields: Any) -> dict[str, Any]:
    payload = {"model": "gemini-2.5-flash", "messages": PROMPT, **fields}
    if route == "chat→messages":
        return messages_request_of(payload, "claude-upstream", 1024)
    if route == "chat→converse":
        return chat_to_converse(payload)
    return gemini_request(payload)


def sent_choice(route: str, body: dict[str, Any]) -> Any:
    """What each provider's body says the model may do with the tools."""
    if route == "chat→messages":
        return body.get("tool_choice")
    if route == "chat→converse":
        config = body.get("toolConfig")
        return None if config is None else config.get("toolChoice")
    return (body.get("toolConfig") or {}).get("functionCallingConfig")


def sent_tool(route: str, body: dict[str, Any]) -> dict[str, Any]:
    if route == "chat→messages":
        return body["tools"][0]
    if route == "chat→converse":
        return body["toolConfig"]["tools"][0]["toolSpec"]
    return body["tools"][0]["functionDeclarations"][0]


@pytest.mark.parametrize("route", CHAT_ROUTES)
def test_every_chat_table_has_a_row_for_each_tool_choice_variant_and_each_strict(route: str) -> None:
    rows = MATRICES[route].sub_fields
    for name in ("none", "auto", "required", "a named function"):
        assert rows[f"tool_choice: {name}"].handling == TRANSLATED
    assert rows["tools[].function.strict"].handling == NOT_SENT
    assert rows["response_format.json_schema.strict"].handling == NOT_SENT


@pytest.mark.parametrize(
    ("route", "choice", "expected"),
    [
        ("chat→messages", "none", {"type": "none"}),
        ("chat→messages", "auto", {"type": "auto"}),
        ("chat→messages", "required", {"type": "any"}),
        ("chat→messages", NAMED, {"type": "tool", "name": "get_weather"}),
        ("chat→converse", "none", None),
        ("chat→converse", "auto", {"auto": {}}),
        ("chat→converse", "required", {"any": {}}),
        ("chat→converse", NAMED, {"tool": {"name": "get_weather"}}),
        ("chat→gemini", "none", {"mode": "NONE"}),
        ("chat→gemini", "auto", {"mode": "AUTO"}),
        ("chat→gemini", "required", {"mode": "ANY"}),
        ("chat→gemini", NAMED, {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
    ],
)
def test_each_tool_choice_variant_becomes_what_its_row_says(route: str, choice: Any, expected: Any) -> None:
    assert sent_choice(route, build(route, tools=[WEATHER], tool_choice=choice)) == expected


def test_tool_choice_none_on_converse_sends_no_tools_at_all() -> None:
    assert "toolConfig" not in build("chat→converse", tools=[WEATHER], tool_choice="none")


@pytest.mark.parametrize("route", CHAT_ROUTES)
def test_a_strict_function_is_sent_as_its_schema_without_strict(route: str) -> None:
    strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    loose = build(route, tools=[WEATHER])
    tight = build(route, tools=[strict])
    assert sent_tool(route, tight) == sent_tool(route, loose)
    assert "strict" not in str(sent_tool(route, tight))


@pytest.mark.parametrize("route", CHAT_ROUTES)
def test_a_strict_json_schema_is_carried_as_the_same_schema_as_a_loose_one(route: str) -> None:
    def form(strict: bool) -> dict[str, Any]:
        spec = {"name": "person", "schema": PERSON, "strict": strict}
        return {"type": "json_schema", "json_schema": spec}

    assert build(route, response_format=form(True)) == build(route, response_format=form(False))


def test_responses_strict_function_and_format_reach_the_chat_request() -> None:
    chat = chat_of_responses(
        {
            "model": "m",
            "input": "hi",
            "tools": [{"type": "function", "name": "f", "parameters": PERSON, "strict": True}],
            "text": {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}},
        },
        "up",
    )
    assert chat["tools"][0]["function"]["strict"] is True
    assert chat["response_format"]["json_schema"]["strict"] is True


def test_responses_tool_choice_variants_reach_the_chat_request() -> None:
    def choice(value: Any) -> Any:
        return chat_of_responses({"model": "m", "input": "hi", "tool_choice": value}, "up")["tool_choice"]

    assert [choice(v) for v in ("none", "auto", "required")] == ["none", "auto", "required"]
    assert choice({"type": "function", "name": "f"}) == {"type": "function", "function": {"name": "f"}}


def test_responses_allowed_tools_choice_is_refused_naming_tool_choice() -> None:
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]}
    with pytest.raises(FieldRefused) as refused:
        chat_of_responses({"model": "m", "input": "hi", "tool_choice": allowed}, "up")
    assert refused.value.field == "tool_choice"


def test_responses_reasoning_summary_is_not_sent() -> None:
    chat = chat_of_responses(
        {"model": "m", "input": "hi", "reasoning": {"effort": "low", "summary": "detailed"}}, "up"
    )
    assert chat["reasoning_effort"] == "low"
    assert "summary" not in str(chat)


def test_responses_assistant_text_and_its_function_calls_are_one_chat_message() -> None:
    chat = chat_of_responses(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "weather in Paris and London?"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Let me"}],
                },
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"city":"Paris"}'},
                {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"city":"London"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2", "output": "rain"},
            ],
        },
        "up",
    )
    user, assistant, first, second = chat["messages"]
    assert (user["role"], assistant["content"]) == ("user", "Let me")
    assert [call["id"] for call in assistant["tool_calls"]] == ["c1", "c2"]
    assert (first["role"], first["tool_call_id"], second["content"]) == ("tool", "c1", "rain")


@pytest.mark.parametrize("route", CHAT_ROUTES)
def test_a_participant_name_and_an_image_detail_change_nothing_sent(route: str) -> None:
    image = "data:image/png;base64,iVBORw0KGgo="

    def turn(**extra: Any) -> list[dict[str, Any]]:
        part = {"type": "image_url", "image_url": {"url": image, **extra}}
        return [{"role": "user", "content": [{"type": "text", "text": "look"}, part]}]

    plain = build(route, messages=turn())
    named = build(route, messages=[{**turn(detail="high")[0], "name": "ada"}])
    assert named == plain
    rows = MATRICES[route].sub_fields
    assert (
        rows["messages[].name"].handling == rows["messages[].content[].image_url.detail"].handling == NOT_SENT
    )
