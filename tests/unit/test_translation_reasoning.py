"""reasoning_effort in each provider's terms (modelgate/proxy/translation/reasoning.py), and reasoning tokens
in a translated answer's usage."""

from __future__ import annotations

import pytest

from modelgate.proxy.translation.chat_to_messages import chat_usage_of
from modelgate.proxy.translation.field_rules import FieldRefused
from modelgate.proxy.translation.reasoning import claude_thinking, gemini_thinking
from modelgate.proxy.upstream.dialects.bedrock_converse import chat_to_converse, converse_to_chat


@pytest.mark.parametrize(
    ("effort", "budget"),
    [("minimal", 1024), ("low", 1024), ("medium", 4096), ("high", 16384), ("xhigh", 32768), ("max", 65536)],
)
def test_claude_budgets_by_effort(effort: str, budget: int) -> None:
    assert claude_thinking(effort, 100_000) == {"type": "enabled", "budget_tokens": budget}


def test_a_claude_budget_is_cut_to_fit_the_limit_but_never_below_1024() -> None:
    assert claude_thinking("max", 3000) == {"type": "enabled", "budget_tokens": 2999}
    with pytest.raises(FieldRefused, match="above 1024"):
        claude_thinking("low", 1024)


def test_no_effort_or_none_is_no_thinking_and_an_unknown_effort_is_refused() -> None:
    assert claude_thinking(None, 4096) is None and claude_thinking("none", 4096) is None
    with pytest.raises(FieldRefused) as refused:
        claude_thinking("extreme", 4096)
    assert refused.value.field == "reasoning_effort"


def test_gemini_levels_and_budgets() -> None:
    assert gemini_thinking("minimal", "gemini-3-pro") == {"thinkingLevel": "low", "includeThoughts": True}
    assert gemini_thinking("xhigh", "gemini-3-flash") == {"thinkingLevel": "high", "includeThoughts": True}
    assert gemini_thinking("medium", "gemini-2.5-pro") == {"thinkingBudget": 8192, "includeThoughts": True}
    assert gemini_thinking("none", "gemini-2.5-flash") == {"thinkingBudget": 0, "includeThoughts": False}
    assert gemini_thinking(None, "gemini-2.5-flash") is None


def test_anthropic_thinking_tokens_are_chat_reasoning_tokens() -> None:
    usage = chat_usage_of(
        {"input_tokens": 3, "output_tokens": 50, "output_tokens_details": {"thinking_tokens": 40}}
    )
    assert usage["completion_tokens"] == 50
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 40}
    assert "completion_tokens_details" not in chat_usage_of({"input_tokens": 3, "output_tokens": 5})


def test_claude_on_converse_thinks_with_additional_model_fields_and_the_reasoning_comes_back() -> None:
    body = chat_to_converse(
        {
            "model": "us.anthropic.claude-sonnet-4-5-v1:0",
            "messages": [{"role": "user", "content": "hi"}],
            "reasoning_effort": "medium",
        }
    )
    assert body["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 4095}}
    assert body["inferenceConfig"]["maxTokens"] == 4096
    answer = {
        "output": {
            "message": {
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "pondering", "signature": "sig"}}},
                    {"text": "hello"},
                ]
            }
        },
        "stopReason": "end_turn",
    }
    message = converse_to_chat(answer, "m", "chatcmpl-1")["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("hello", "pondering")
