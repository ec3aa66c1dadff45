"""prompt_slots: every text of a request the model sees, per route, and only those; wrong shapes skipped,
never refused; deep nesting walked without recursion; a replaced slot is what the re-encoded body carries."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from modelgate.proxy.content.prompt_texts import prompt_slots
from modelgate.proxy.content.text_slots import TextSlot


def texts(route: str, payload: dict[str, Any]) -> list[str]:
    return [slot.text for slot in prompt_slots(route, payload)]


# -- chat completions ----------------------------------------------------------------------------------


def test_chat_message_contents_are_texts_but_names_and_roles_are_not() -> None:
    payload = {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "name": "boss", "content": "be brief"},
            {"role": "user", "content": "hello"},
        ],
    }
    assert texts("chat_completions", payload) == ["be brief", "hello"]


def test_chat_text_parts_are_texts_and_image_parts_are_not() -> None:
    content = [
        {"type": "text", "text": "look at this"},
        {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}},
        {"type": "input_text", "text": "and this"},
    ]
    assert texts("chat_completions", {"messages": [{"role": "user", "content": content}]}) == [
        "look at this",
        "and this",
    ]


def test_chat_tool_call_arguments_are_one_text_each() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": "x"}'}}
        ],
        "function_call": {"name": "g", "arguments": '{"b": 1}'},
    }
    assert texts("chat_completions", {"messages": [message]}) == ['{"a": "x"}', '{"b": 1}']


def test_chat_tool_results_are_texts() -> None:
    messages = [
        {"role": "tool", "tool_call_id": "c1", "content": "42 degrees"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "sunny"}]},
    ]
    assert texts("chat_completions", {"messages": messages}) == ["42 degrees", "sunny"]


def test_chat_assistant_refusals_are_texts() -> None:
    messages = [
        {"role": "assistant", "refusal": "I can't"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    ]
    assert texts("chat_completions", {"messages": messages}) == ["I can't", "no"]


# -- completions and embeddings ------------------------------------------------------------------------


def test_a_completion_prompt_string_and_suffix_are_texts() -> None:
    assert texts("completions", {"prompt": "once upon", "suffix": "the end"}) == ["once upon", "the end"]


def test_a_completion_prompt_list_keeps_its_strings_and_skips_token_arrays() -> None:
    payload = {"prompt": ["one", [1, 2, 3], "two", 7]}
    assert texts("completions", payload) == ["one", "two"]


def test_token_id_prompts_have_no_text() -> None:
    assert texts("completions", {"prompt": [1, 2, 3]}) == []
    assert texts("embeddings", {"input": [[1, 2], [3]]}) == []


@pytest.mark.parametrize(("value", "expected"), [("a b", ["a b"]), (["a", "b"], ["a", "b"])])
def test_embedding_inputs_are_texts(value: Any, expected: list[str]) -> None:
    assert texts("embeddings", {"input": value}) == expected


# -- responses -----------------------------------------------------------------------------------------


def test_responses_instructions_and_string_input_are_texts() -> None:
    assert texts("responses", {"instructions": "be kind", "input": "hi"}) == ["be kind", "hi"]


def test_responses_message_items_with_string_or_parts() -> None:
    items = [
        {"role": "user", "content": "plain"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "a"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
            ],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
        {"type": "message", "role": "user", "content": [{"type": "text", "text": "c"}]},
    ]
    assert texts("responses", {"input": items}) == ["plain", "a", "b", "c"]


def test_responses_function_calls_and_outputs_are_texts() -> None:
    items = [
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "parts"}],
        },
    ]
    assert texts("responses", {"input": items}) == ['{"q": "x"}', "found", "parts"]


def test_responses_stored_prompt_variables_are_texts() -> None:
    variables = {"name": "Ann", "topic": {"type": "input_text", "text": "tax"}, "pic": {"type": "x"}}
    payload = {"prompt": {"id": "pmpt_1", "version": "2", "variables": variables}}
    assert texts("responses", payload) == ["Ann", "tax"]


def test_responses_reasoning_and_unknown_items_are_skipped() -> None:
    items = [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought"}]}, {"type": 5}]
    assert texts("responses", {"input": items}) == []


# -- messages ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["messages", "messages_count_tokens"])
def test_anthropic_system_as_string_or_text_blocks(route: str) -> None:
    assert texts(route, {"system": "rules"}) == ["rules"]
    assert texts(route, {"system": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]}) == [
        "r1",
        "r2",
    ]


def test_anthropic_message_content_string_and_text_blocks() -> None:
    messages = [
        {"role": "user", "content": "plain"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "block"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            ],
        },
    ]
    assert texts("messages", {"messages": messages}) == ["plain", "block"]


def test_anthropic_tool_use_input_strings_at_every_depth_are_texts() -> None:
    block = {
        "type": "tool_use",
        "id": "t1",
        "name": "search",
        "input": {"query": "q", "filters": [{"field": "f", "value": 3}, "loose"], "deep": {"a": {"b": "z"}}},
    }
    assert texts("messages", {"messages": [{"role": "assistant", "content": [block]}]}) == [
        "q",
        "f",
        "loose",
        "z",
    ]


def test_anthropic_tool_results_as_string_or_text_blocks() -> None:
    content = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "result one"},
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "result two"}]},
    ]
    assert texts("messages", {"messages": [{"role": "user", "content": content}]}) == [
        "result one",
        "result two",
    ]


def test_anthropic_plain_text_documents_are_texts() -> None:
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}}
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}
    assert texts("messages", {"messages": [{"role": "user", "content": [document, pdf]}]}) == ["doc"]


# -- decisions -----------------------------------------------------------------------------------------


def test_decision_string_input_and_question_texts() -> None:
    payload = {
        "input": "hello there",
        "questions": [
            {"type": "predicate", "name": "is_greeting", "instructions": "Is it a greeting?"},
            {
                "type": "choice",
                "name": "tone",
                "instructions": [{"type": "input_text", "text": "What tone?"}],
                "choices": [{"value": "friendly", "description": "warm"}, {"value": True}],
            },
            {
                "type": "score",
                "instructions": "How polite?",
                "levels": [{"label": "very", "description": "v"}],
            },
        ],
    }
    assert texts("decisions", payload) == [
        "hello there",
        "Is it a greeting?",
        "What tone?",
        "friendly",
        "warm",
        "How polite?",
        "very",
        "v",
    ]


def test_decision_message_items_with_text_and_json_parts() -> None:
    items = [
        {"role": "user", "content": "good morning"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see data"},
                {"type": "input_json", "data": {"name": "Ann", "tags": ["a"]}},
            ],
        },
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    ]
    assert texts("decisions", {"input": items, "questions": []}) == [
        "good morning",
        "see data",
        "Ann",
        "a",
        "{}",
    ]


def test_a_decision_state_of_any_json_has_every_string_as_a_text() -> None:
    payload = {"state": {"user": "Ann", "orders": [{"id": 1, "note": "fragile"}]}, "questions": []}
    assert texts("decisions", payload) == ["Ann", "fragile"]


def test_the_gateway_s_own_choice_options_are_texts() -> None:
    question = {"id": "pick", "type": "choice", "options": ["b", {"value": "c"}, 3]}
    assert texts("decisions", {"state": "s", "questions": [question]}) == ["s", "b", "c"]


# -- media prompts and realtime ------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["images_generations", "videos_create"])
def test_a_media_prompt_is_a_text(route: str) -> None:
    assert texts(route, {"model": "m", "prompt": "a cat", "size": "1024x1024"}) == ["a cat"]


def test_realtime_secret_instructions_top_level_and_in_the_session() -> None:
    payload = {"instructions": "top", "session": {"type": "realtime", "model": "m", "instructions": "inner"}}
    assert texts("realtime_client_secrets", payload) == ["top", "inner"]


# -- totality ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["models", "audio_speech", "images_edits", "no_such_route"])
def test_routes_without_prompt_texts_have_none(route: str) -> None:
    assert prompt_slots(route, {"prompt": "x", "input": "y", "messages": [{"content": "z"}]}) == []


WRONG_SHAPES: list[Any] = [None, 1, 1.5, True, "s", [], {}, [None, 1, "s", [], {}], {"type": ["x"]}]
ROUTES = [
    "chat_completions",
    "completions",
    "responses",
    "messages",
    "messages_count_tokens",
    "embeddings",
    "decisions",
    "images_generations",
    "videos_create",
    "realtime_client_secrets",
]
FIELDS = ["messages", "content", "prompt", "input", "state", "questions", "system", "session", "instructions"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("value", WRONG_SHAPES, ids=repr)
def test_wrong_types_anywhere_are_skipped_never_refused(route: str, value: Any) -> None:
    payload: dict[str, Any] = {name: value for name in FIELDS}
    payload["messages"] = [
        {"role": "user", "content": value, "tool_calls": value, "function_call": value},
        {"role": "assistant", "content": [value, {"type": value, "text": value}], "tool_calls": [value]},
    ]
    payload["input"] = [value, {"type": "message", "content": value}, {"type": "function_call_output"}]
    payload["questions"] = [value, {"instructions": value, "choices": value, "levels": [value]}]
    for slot in prompt_slots(route, payload):
        assert isinstance(slot.text, str)


@pytest.mark.parametrize("route", ROUTES)
def test_a_body_that_is_not_an_object_has_no_texts(route: str) -> None:
    assert prompt_slots(route, ["messages"]) == []  # type: ignore[arg-type]


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"k": [value]}
    return value


def test_a_tool_input_nested_100_000_deep_is_walked_without_recursion() -> None:
    block = {"type": "tool_use", "id": "t", "name": "f", "input": nested(100_000, "deep secret")}
    slots = prompt_slots("messages", {"messages": [{"role": "assistant", "content": [block]}]})
    assert [slot.text for slot in slots] == ["deep secret"]


def test_a_decision_state_nested_100_000_deep_is_walked_without_recursion() -> None:
    slots = prompt_slots("decisions", {"state": nested(100_000, "deep"), "questions": []})
    assert [slot.text for slot in slots] == ["deep"]


@pytest.mark.parametrize("route", ROUTES)
def test_deeply_nested_shapes_where_none_are_expected_are_not_walked(route: str) -> None:
    deep = nested(100_000, "x")
    payload = {"messages": [{"role": "user", "content": [deep]}], "input": [deep], "prompt": deep}
    prompt_slots(route, payload)  # returns, whatever it finds


# -- writing back --------------------------------------------------------------------------------------


def redact(slots: list[TextSlot], word: str) -> None:
    for slot in slots:
        slot.replace(slot.text.replace(word, "[REDACTED:word]"))


def test_replaced_chat_texts_are_in_the_re_encoded_body() -> None:
    payload = orjson.loads(
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"my secret"}]},'
        b'{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\\"k\\":\\"secret\\"}"}}]}]}'
    )
    redact(prompt_slots("chat_completions", payload), "secret")
    assert orjson.dumps(payload) == (
        b'{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"my [REDACTED:word]"}]},'
        b'{"role":"assistant","tool_calls":[{"function":{"name":"f",'
        b'"arguments":"{\\"k\\":\\"[REDACTED:word]\\"}"}}]}]}'
    )


def test_replaced_list_items_and_tool_inputs_are_in_the_re_encoded_body() -> None:
    completion = {"prompt": ["a secret", [1, 2]]}
    redact(prompt_slots("completions", completion), "secret")
    assert orjson.dumps(completion) == b'{"prompt":["a [REDACTED:word]",[1,2]]}'
    block = {"type": "tool_use", "input": {"q": ["secret", 1]}}
    message = {"messages": [{"role": "assistant", "content": [block]}]}
    redact(prompt_slots("messages", message), "secret")
    assert orjson.dumps(block) == b'{"type":"tool_use","input":{"q":["[REDACTED:word]",1]}}'
