"""OpenAI's `reasoning_effort` in the terms of the providers it is translated to.

- Claude (Anthropic Messages, and Claude models on Bedrock Converse): `thinking` with a token budget. Claude
  thinks with at least 1,024 tokens, and the budget counts within `max_tokens` (as reasoning tokens count
  within OpenAI's `max_completion_tokens`), so a budget is cut to fit the request's limit; a limit that
  leaves no room for 1,024 is the client's 400. `none` sends no thinking.
- Gemini: `thinkingConfig`, the level on Gemini 3, the budget on earlier models (Google's own table for
  its OpenAI-compatible endpoint); the thought summary is asked for, so it can come back.
"""

from __future__ import annotations

from typing import Any

from modelgate.proxy.translation.field_rules import FieldRefused

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
CLAUDE_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768, "max": 65536}
CLAUDE_MIN_BUDGET = 1024
GEMINI_BUDGETS = {"none": 0, "minimal": 1024, "low": 1024, "medium": 8192}
GEMINI_TOP_BUDGET = 24576
_GEMINI_3_LEVELS = {"none": "low", "minimal": "low", "low": "low"}


def _checked(effort: Any) -> str:
    if effort not in EFFORTS:
        raise FieldRefused("reasoning_effort", f"must be one of {', '.join(EFFORTS)}")
    return effort


def claude_thinking(effort: Any, max_tokens: int) -> dict[str, Any] | None:
    """The Messages `thinking` for an effort within `max_tokens` (None: no thinking)."""
    if effort is None or _checked(effort) == "none":
        return None
    budget = min(CLAUDE_BUDGETS[effort], max_tokens - 1)
    if budget < CLAUDE_MIN_BUDGET:
        raise FieldRefused(
            "reasoning_effort",
            f"Claude thinks with at least {CLAUDE_MIN_BUDGET} tokens within the output limit: "
            f"raise max_completion_tokens above {CLAUDE_MIN_BUDGET} (it is {max_tokens})",
        )
    return {"type": "enabled", "budget_tokens": budget}


def gemini_thinking(effort: Any, model: str) -> dict[str, Any] | None:
    """The Gemini `thinkingConfig` for an effort on `model` (None when the request names none)."""
    if effort is None:
        return None
    effort = _checked(effort)
    if "gemini-3" in model:
        return {"thinkingLevel": _GEMINI_3_LEVELS.get(effort, "high"), "includeThoughts": True}
    budget = GEMINI_BUDGETS.get(effort, GEMINI_TOP_BUDGET)
    return {"thinkingBudget": budget, "includeThoughts": budget > 0}
