"""answer_slots: every text of a whole answer the client reads, in the client's wire format, per route;
wrong shapes skipped, deep nesting walked without recursion, a replaced slot is in the re-encoded answer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from modelgate.proxy.content.answer_texts import answer_slots


def texts(route: str, body: dict[str, Any]) -> list[str]:
    return [slot.text for slot in answer_slots(route, body)]


def test_chat_answer_contents_refusals_and_tool_arguments_are_texts() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"},
            {"index": 1, "message": {"role": "assistant", "content": None, "refusal": "I won't"}},
            {
                "index": 2,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
            },
        ],
    }
    assert texts("chat_completions", body) == ["hello", "I won't", "{}"]


def test_chat_answer_content_parts_are_texts() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}
    assert texts("chat_completions", {"choices": [{"message": message}]}) == ["a"]


def test_completion_answer_choices_are_texts() -> None:
    body = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": "one"}, {"index": 1, "text": "two"}],
    }
    assert texts("completions", body) == ["one", "two"]


def test_responses_answer_output_texts_refusals_and_calls() -> None:
    body = {
        "object": "response",
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "answer", "annotations": []},
                    {"type": "refusal", "refusal": "not that"},
                ],
            },
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"x": "y"}'},
        ],
        "output_text": "answer",
    }
    assert texts("responses", body) == ["answer", "not that", '{"x": "y"}', "answer"]


def test_messages_answer_text_blocks_and_tool_use_input_strings() -> None:
    body = {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "sure"},
            {
                "type": "tool_use",
                "id": "t",
                "name": "f",
                "input": {"city": "Paris", "days": 3, "tags": ["x"]},
            },
        ],
        "stop_reason": "tool_use",
    }
    assert texts("messages", body) == ["sure", "Paris", "x"]


def test_decision_answers_in_words_are_texts_and_typed_values_are_not() -> None:
    body = {
        "object": "decision",
        "answers": [
            {"question_id": "ok", "value": True},
            {"question_id": "why", "value": "because"},
            {"type": "choice", "name": "tone", "choice": "friendly", "value": "friendly", "confidence": 1.0},
            {"type": "score", "score": 1.0, "value": 1},
        ],
    }
    assert texts("decisions", body) == ["because", "friendly", "friendly"]


@pytest.mark.parametrize("route", ["embeddings", "images_generations", "audio_speech", "nope"])
def test_routes_without_answer_texts_have_none(route: str) -> None:
    assert answer_slots(route, {"choices": [{"text": "x"}], "content": [{"type": "text", "text": "y"}]}) == []


WRONG_SHAPES: list[Any] = [None, 1, "s", [], {}, [None, 2, "s", {"type": ["x"]}]]


@pytest.mark.parametrize("route", ["chat_completions", "completions", "responses", "messages", "decisions"])
@pytest.mark.parametrize("value", WRONG_SHAPES, ids=repr)
def test_wrong_types_anywhere_are_skipped_never_refused(route: str, value: Any) -> None:
    body = {
        "choices": [
            value,
            {"message": value, "text": value},
            {"message": {"content": value, "tool_calls": value}},
        ],
        "output": [value, {"type": "message", "content": value}, {"type": value}],
        "content": value,
        "answers": value,
        "output_text": value,
    }
    for slot in answer_slots(route, body):
        assert isinstance(slot.text, str)


@pytest.mark.parametrize("route", ["chat_completions", "completions", "responses", "messages", "decisions"])
def test_an_answer_that_is_not_an_object_has_no_texts(route: str) -> None:
    assert answer_slots(route, [{"content": "x"}]) == []  # type: ignore[arg-type]


def test_a_tool_use_input_nested_100_000_deep_is_walked_without_recursion() -> None:
    value: Any = "deep"
    for _ in range(100_000):
        value = [{"k": value}]
    body = {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"v": value}}]}
    assert texts("messages", body) == ["deep"]


def test_replaced_answer_texts_are_in_the_re_encoded_body() -> None:
    body = orjson.loads(
        b'{"output":[{"type":"message","content":[{"type":"output_text","text":"mail a@b.test"}]}],'
        b'"output_text":"mail a@b.test"}'
    )
    for slot in answer_slots("responses", body):
        slot.replace(slot.text.replace("a@b.test", "[REDACTED:email]"))
    assert orjson.dumps(body) == (
        b'{"output":[{"type":"message","content":[{"type":"output_text","text":"mail [REDACTED:email]"}]}],'
        b'"output_text":"mail [REDACTED:email]"}'
    )
