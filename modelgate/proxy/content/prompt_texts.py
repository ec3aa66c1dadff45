"""The texts of a request the model sees, per route: where a content rule looks, and where a redaction goes.

Names, ids, roles, model names and settings are not texts. Multipart bodies are not here: their text fields
are checked as they stream (`StreamedMultipart.set_text_guard`).
"""

from __future__ import annotations

from typing import Any

from modelgate.proxy.content.text_slots import (
    Collector,
    TextSlot,
    collect_parts,
    collect_strings,
    collect_text,
    dicts,
    slots_of,
)

# Content parts by type, and the key of each one's text.
CHAT_PARTS = {"text": "text", "input_text": "text", "refusal": "refusal"}
RESPONSES_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
ANTHROPIC_BLOCKS = {"text": "text"}


def _strings_or_list(slots: list[TextSlot], payload: dict, key: str) -> None:
    """A string, or a list whose strings are texts (token-id arrays beside them are skipped)."""
    value = payload.get(key)
    if isinstance(value, str):
        slots.append(TextSlot(payload, key))
    elif isinstance(value, list):
        slots.extend(TextSlot(value, index) for index, item in enumerate(value) if isinstance(item, str))


def _arguments(slots: list[TextSlot], holder: dict, key: str) -> None:
    """`holder[key].arguments`: a call's arguments, one JSON string read as one text."""
    call = holder.get(key)
    if isinstance(call, dict):
        collect_text(slots, call, "arguments")


def chat_message(slots: list[TextSlot], message: dict) -> None:
    """A Chat Completions message: content (string or parts), refusal, and its tool and function calls."""
    collect_parts(slots, message, "content", CHAT_PARTS)
    collect_text(slots, message, "refusal")
    for call in dicts(message.get("tool_calls")):
        _arguments(slots, call, "function")
    _arguments(slots, message, "function_call")


def _chat(slots: list[TextSlot], payload: dict) -> None:
    for message in dicts(payload.get("messages")):
        chat_message(slots, message)


def _completions(slots: list[TextSlot], payload: dict) -> None:
    _strings_or_list(slots, payload, "prompt")
    collect_text(slots, payload, "suffix")


def response_items(slots: list[TextSlot], items: list) -> None:
    """Responses-style input items: messages, function and custom tool calls and their outputs."""
    for item in dicts(items):
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            collect_parts(slots, item, "content", RESPONSES_PARTS)
        elif kind == "function_call":
            collect_text(slots, item, "arguments")
        elif kind == "custom_tool_call":
            collect_text(slots, item, "input")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            collect_parts(slots, item, "output", RESPONSES_PARTS)


def _prompt_variables(slots: list[TextSlot], payload: dict) -> None:
    """A stored prompt's variables (`prompt.variables`): strings or input_text parts put into the prompt."""
    prompt = payload.get("prompt")
    variables = prompt.get("variables") if isinstance(prompt, dict) else None
    if not isinstance(variables, dict):
        return
    for name, value in variables.items():
        if isinstance(value, str):
            slots.append(TextSlot(variables, name))
        elif isinstance(value, dict) and value.get("type") == "input_text":
            collect_text(slots, value, "text")


def _responses(slots: list[TextSlot], payload: dict) -> None:
    collect_text(slots, payload, "instructions")
    _prompt_variables(slots, payload)
    value = payload.get("input")
    if isinstance(value, str):
        slots.append(TextSlot(payload, "input"))
    elif isinstance(value, list):
        response_items(slots, value)


def anthropic_blocks(slots: list[TextSlot], message: dict, key: str) -> None:
    """Anthropic content: a string, or blocks (text, tool_use input, tool_result content, text documents)."""
    value = message.get(key)
    if isinstance(value, str):
        slots.append(TextSlot(message, key))
    for block in dicts(value):
        _anthropic_block(slots, block)


def _anthropic_block(slots: list[TextSlot], block: dict) -> None:
    kind = block.get("type")
    if kind == "text":
        collect_text(slots, block, "text")
    elif kind == "tool_use" and isinstance(block.get("input"), dict):
        collect_strings(slots, block, "input")
    elif kind == "tool_result":
        collect_parts(slots, block, "content", ANTHROPIC_BLOCKS)
    elif kind == "document":
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "text":
            collect_text(slots, source, "data")


def _messages(slots: list[TextSlot], payload: dict) -> None:
    collect_parts(slots, payload, "system", ANTHROPIC_BLOCKS)
    for message in dicts(payload.get("messages")):
        anthropic_blocks(slots, message, "content")


def _embeddings(slots: list[TextSlot], payload: dict) -> None:
    _strings_or_list(slots, payload, "input")


def _json_parts(slots: list[TextSlot], container: dict, key: str) -> None:
    """The strings of `input_json` parts in `container[key]`: JSON the model reads as text."""
    for part in dicts(container.get(key)):
        if part.get("type") == "input_json" and isinstance(part.get("data"), dict | list):
            collect_strings(slots, part, "data")


def _decision_input(slots: list[TextSlot], payload: dict, key: str) -> None:
    """`input` or `state`: a string, items (messages with text and JSON parts, tool calls), or any JSON."""
    value = payload.get(key)
    if not isinstance(value, list):
        collect_strings(slots, payload, key)  # a string, or the gateway's own shape: any JSON state
        return
    for index, item in enumerate(value):
        if isinstance(item, dict) and ("type" in item or "role" in item):
            response_items(slots, [item])
            _json_parts(slots, item, "content")
        else:
            collect_strings(slots, value, index)


def _decisions(slots: list[TextSlot], payload: dict) -> None:
    if "input" in payload:
        _decision_input(slots, payload, "input")
    if "state" in payload:
        _decision_input(slots, payload, "state")
    for question in dicts(payload.get("questions")):
        collect_parts(slots, question, "instructions", {"input_text": "text"})
        _json_parts(slots, question, "instructions")
        for choice in dicts(question.get("choices")):
            collect_text(slots, choice, "value")
            collect_text(slots, choice, "description")
        for level in dicts(question.get("levels")):
            collect_text(slots, level, "label")
            collect_text(slots, level, "description")
        options = question.get("options")  # the gateway's own choice shape: strings or {value}
        if not isinstance(options, list):
            options = []
        for index, option in enumerate(options):
            if isinstance(option, str):
                slots.append(TextSlot(options, index))
            elif isinstance(option, dict):
                collect_text(slots, option, "value")


def _prompt(slots: list[TextSlot], payload: dict) -> None:
    collect_text(slots, payload, "prompt")


def _realtime_secret(slots: list[TextSlot], payload: dict) -> None:
    collect_text(slots, payload, "instructions")
    session = payload.get("session")
    if isinstance(session, dict):
        collect_text(slots, session, "instructions")


_BY_ROUTE: dict[str, Collector] = {
    "chat_completions": _chat,
    "completions": _completions,
    "responses": _responses,
    "messages": _messages,
    "messages_count_tokens": _messages,
    "embeddings": _embeddings,
    "decisions": _decisions,
    "images_generations": _prompt,
    "videos_create": _prompt,
    "realtime_client_secrets": _realtime_secret,
}


def prompt_slots(route_name: str, payload: dict[str, Any]) -> list[TextSlot]:
    """Every text of a JSON request body the model sees, in body order; [] for routes without any."""
    return slots_of(_BY_ROUTE, route_name, payload)
