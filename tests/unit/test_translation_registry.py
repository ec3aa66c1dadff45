"""Which rows get a translator, and which Messages requests need a native row."""

from __future__ import annotations

import orjson
import pytest

from modelgate.plugins.native_features import native_feature_of
from modelgate.proxy.translation import translator_for
from modelgate.proxy.translation.chat_on_anthropic import ChatOnMessages
from modelgate.proxy.translation.messages_on_openai import MessagesOnChatCompletions


def test_messages_on_an_openai_row_is_translated_to_chat_completions() -> None:
    translator = translator_for("messages", "openai")
    assert isinstance(translator, MessagesOnChatCompletions)
    assert translator.upstream_path == "/v1/chat/completions"


def test_chat_completions_on_an_anthropic_row_is_translated_to_messages() -> None:
    translator = translator_for("chat_completions", "anthropic")
    assert isinstance(translator, ChatOnMessages)
    assert translator.upstream_path == "/v1/messages"


@pytest.mark.parametrize(
    ("route", "kind", "native"),
    [
        ("messages", "anthropic", True),
        ("messages_count_tokens", "anthropic", True),
        ("chat_completions", "openai", False),
        ("messages", "mock", True),
        # An OpenAI-kind provider flagged native_messages serves Messages itself.
        ("messages", "openai", True),
    ],
)
def test_rows_that_speak_the_routes_format_get_no_translator(route: str, kind: str, native: bool) -> None:
    assert translator_for(route, kind, native) is None


def feature(payload: dict) -> str | None:
    return native_feature_of(payload, orjson.dumps(payload))


def test_a_thinking_request_needs_a_native_row() -> None:
    assert feature({"thinking": {"type": "enabled", "budget_tokens": 1024}}) == "extended thinking"
    assert feature({"thinking": {"type": "adaptive"}}) == "extended thinking"


def test_disabled_thinking_does_not() -> None:
    assert feature({"thinking": {"type": "disabled"}, "messages": []}) is None


@pytest.mark.parametrize(
    "payload",
    [
        {"system": [{"type": "text", "text": "long", "cache_control": {"type": "ephemeral"}}]},
        {"tools": [{"name": "f", "input_schema": {}, "cache_control": {"type": "ephemeral"}}]},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [
                                {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
                            ],
                        }
                    ],
                }
            ]
        },
    ],
)
def test_cache_control_anywhere_in_system_tools_or_messages_needs_a_native_row(payload: dict) -> None:
    assert feature(payload) == "prompt caching"


def test_top_level_automatic_caching_needs_a_native_row() -> None:
    assert feature({"cache_control": {"type": "ephemeral"}, "messages": []}) == "prompt caching"


def test_a_tool_parameter_or_tool_input_named_cache_control_is_not_caching() -> None:
    schema = {"type": "object", "properties": {"cache_control": {"type": "string"}}}
    call = {"type": "tool_use", "id": "t", "name": "f", "input": {"cache_control": "no-store"}}
    payload = {
        "tools": [{"name": "f", "input_schema": schema}],
        "messages": [{"role": "assistant", "content": [call]}],
    }
    assert feature(payload) is None


def test_the_words_cache_control_inside_a_prompt_are_only_text() -> None:
    assert feature({"messages": [{"role": "user", "content": 'explain "cache_control" to me'}]}) is None
