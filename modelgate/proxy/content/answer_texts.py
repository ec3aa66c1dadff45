"""The texts of a whole (not streamed) answer the client reads, per route, in the client's wire format (after
translation): where a content rule looks at an answer, and where its redaction goes."""

from __future__ import annotations

from typing import Any

from modelgate.proxy.content.prompt_texts import RESPONSES_PARTS, anthropic_blocks, chat_message
from modelgate.proxy.content.text_slots import (
    Collector,
    TextSlot,
    collect_parts,
    collect_text,
    dicts,
    slots_of,
)


def _chat_choices(slots: list[TextSlot], body: dict) -> None:
    for choice in dicts(body.get("choices")):
        message = choice.get("message")
        if isinstance(message, dict):
            chat_message(slots, message)


def _completion_choices(slots: list[TextSlot], body: dict) -> None:
    for choice in dicts(body.get("choices")):
        collect_text(slots, choice, "text")


def _response_output(slots: list[TextSlot], body: dict) -> None:
    for item in dicts(body.get("output")):
        kind = item.get("type")
        if kind == "message":
            collect_parts(slots, item, "content", RESPONSES_PARTS)
        elif kind == "function_call":
            collect_text(slots, item, "arguments")
        elif kind == "custom_tool_call":
            collect_text(slots, item, "input")
    collect_text(slots, body, "output_text")  # a convenience copy some SDKs and proxies add


def _message_content(slots: list[TextSlot], body: dict) -> None:
    anthropic_blocks(slots, body, "content")


def _decision_answers(slots: list[TextSlot], body: dict) -> None:
    for answer in dicts(body.get("answers")):
        collect_text(slots, answer, "value")  # the gateway's `text` questions answer in words
        collect_text(slots, answer, "choice")


_BY_ROUTE: dict[str, Collector] = {
    "chat_completions": _chat_choices,
    "completions": _completion_choices,
    "responses": _response_output,
    "messages": _message_content,
    "decisions": _decision_answers,
}


def answer_slots(route_name: str, body: dict[str, Any]) -> list[TextSlot]:
    """Every text of a whole answer body the client reads, in body order; [] for routes without any."""
    return slots_of(_BY_ROUTE, route_name, body)
