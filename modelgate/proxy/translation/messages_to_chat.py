"""A Messages request as a chat completion request, and a chat completion answer as a Message.

Pure functions on parsed JSON; `messages_on_openai` wires them to the forwarder. Requests that need
what only native rows offer (extended thinking, prompt caching) never get here:
modelgate/plugins/native_features.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.field_matrix import MESSAGES_ON_CHAT
from modelgate.proxy.translation.field_rules import check_fields
from modelgate.proxy.translation.images import image_part_of

# Chat `finish_reason` → Messages `stop_reason`; "stop" needs more care (see stop_reason_of).
_STOP_REASONS = {
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_EMPTY_SCHEMA = {"type": "object", "properties": {}}
# Messages `output_config.effort` values, each a chat `reasoning_effort` of the same name.
_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def new_message_id() -> str:
    """A fresh `msg_…` id for a translated answer."""
    return "msg_" + os.urandom(12).hex()


# -- request -----------------------------------------------------------------------------------------


def chat_request_of(payload: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    """The chat completion request for a (validated) Messages request (docs/translation-fields.md)."""
    check_fields(payload, MESSAGES_ON_CHAT.fields)
    chat: dict[str, Any] = {"model": upstream_model, "messages": chat_messages_of(payload)}
    # The current OpenAI name; `max_tokens` is refused by its reasoning models.
    chat["max_completion_tokens"] = payload["max_tokens"]
    for name in ("temperature", "top_p"):
        if payload.get(name) is not None:
            chat[name] = payload[name]
    stops = payload.get("stop_sequences")
    if stops:
        chat["stop"] = stops
    tools = payload.get("tools")
    if tools:
        chat["tools"] = [_function_of(tool) for tool in tools]
    choice = payload.get("tool_choice")
    if isinstance(choice, dict):
        chat_choice = _tool_choice_of(choice)
        if chat_choice is not None:
            chat["tool_choice"] = chat_choice
        if choice.get("disable_parallel_tool_use") and tools:
            chat["parallel_tool_calls"] = False
    output_config = payload.get("output_config")
    if output_config is not None:
        chat.update(_output_config_of(output_config))
    metadata = payload.get("metadata")
    if isinstance(metadata, dict):
        user = metadata.get("user_id") or metadata.get("user")
        if isinstance(user, str) and user:
            chat["user"] = user
    tier = payload.get("service_tier")
    if tier is not None:
        chat["service_tier"] = "auto" if tier == "auto" else "default"
    if payload.get("stream"):
        chat["stream"] = True
        # Without it the chat stream carries no usage, and message_delta could not report any.
        chat["stream_options"] = {"include_usage": True}
    return chat


def _output_config_of(config: Any) -> dict[str, Any]:
    """`output_config` in chat terms: its JSON-schema `format` is `response_format` (an Anthropic structured
    output is held to its schema, so the OpenAI one is strict), its `effort` is `reasoning_effort`."""
    if not isinstance(config, dict):
        raise InvalidRequest("'output_config' must be an object")
    chat: dict[str, Any] = {}
    output_format = config.get("format")
    if output_format is not None:
        if not isinstance(output_format, dict) or output_format.get("type") != "json_schema":
            raise InvalidRequest("'output_config.format' must be {'type': 'json_schema', 'schema': {...}}")
        schema = output_format.get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest("'output_config.format.schema' must be an object")
        spec = {"name": "output", "schema": schema, "strict": True}
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    effort = config.get("effort")
    if effort is not None:
        if effort not in _EFFORTS:
            raise InvalidRequest(f"'output_config.effort' must be one of {', '.join(_EFFORTS)}")
        chat["reasoning_effort"] = effort
    return chat


def chat_messages_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The system prompt and the turns as chat messages (tool results become `tool` messages)."""
    out: list[dict[str, Any]] = []
    system = _system_text(payload.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for message in payload["messages"]:
        content = message.get("content")
        if message.get("role") == "assistant":
            out.append(_assistant_message(content))
        else:
            out.extend(_user_messages(content))
    return out


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(b.get("text", "") for b in system if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _unsupported(kind: Any) -> InvalidRequest:
    return InvalidRequest(f"content block type {kind!r} cannot be sent to this model's providers")


def _user_messages(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append(image_part_of(block))
        elif kind == "tool_result":
            tool_messages.append(_tool_message(block, parts))
        else:
            raise _unsupported(kind)
    # Chat wants tool answers right after the assistant turn that called them, before any user text.
    if parts:
        tool_messages.append({"role": "user", "content": _user_content(parts)})
    return tool_messages


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    # Plain strings are accepted by every OpenAI-compatible server; part arrays only where needed.
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _tool_message(block: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool_result as a `tool` message; its images move to the user message that follows."""
    content = block.get("content")
    if isinstance(content, list):
        texts = []
        for item in content:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "text":
                texts.append(item.get("text", ""))
            elif kind == "image":
                parts.append(image_part_of(item))
            else:
                raise _unsupported(kind)
        text = "\n".join(texts)
    else:
        text = content if isinstance(content, str) else ""
    if block.get("is_error"):
        # Chat has no error flag on tool messages; the model still has to learn the call failed.
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": text}


def _assistant_message(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            function = {"name": block.get("name", ""), "arguments": arguments}
            calls.append({"id": block.get("id", ""), "type": "function", "function": function})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # reasoning from an earlier native turn has no chat counterpart
        else:
            raise _unsupported(kind)
    # Assistant text blocks are pieces of one answer (split by citations), so they join seamlessly.
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _function_of(tool: dict[str, Any]) -> dict[str, Any]:
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise InvalidRequest(f"tool type {kind!r} is a server tool only the native providers offer")
    function: dict[str, Any] = {
        "name": tool.get("name", ""),
        "parameters": tool.get("input_schema") or _EMPTY_SCHEMA,
    }
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice_of(choice: dict[str, Any]) -> str | dict[str, Any] | None:
    kind = choice.get("type")
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name", "")}}
    if kind in ("auto", "none"):
        return kind
    return None


# -- answer ------------------------------------------------------------------------------------------


def message_of(completion: dict[str, Any], model: str) -> dict[str, Any]:
    """The Message for a complete chat completion; `model` is the name the client asked for."""
    choices = completion.get("choices") or [{}]
    choice = choices[0]
    answer = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = answer.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        # Chat reasoning carries no signature: a native row would not take this block back.
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = answer.get("content")
    if isinstance(text, list):
        text = "".join(part.get("text", "") for part in text if isinstance(part, dict))
    if not text and isinstance(answer.get("refusal"), str):
        text = answer["refusal"]
    if text:
        content.append({"type": "text", "text": text})
    calls = answer.get("tool_calls") or ()
    for call in calls:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "toolu_" + os.urandom(12).hex(),
                "name": function.get("name", ""),
                "input": tool_input_of(function.get("arguments")),
            }
        )
    stop_reason, stop_sequence = stop_reason_of(
        choice.get("finish_reason"), matched_stop_of(choice), bool(calls)
    )
    return {
        "id": new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_of(completion.get("usage")),
    }


def tool_input_of(arguments: Any) -> dict[str, Any]:
    """Tool arguments (a JSON string) as the tool_use `input` object; {} when they are not an object."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments:
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def matched_stop_of(choice: dict[str, Any]) -> str | None:
    """The stop sequence that ended the answer, if the server names it (vLLM, SGLang); "" when a stop
    sequence ended it but which one is not known (Bedrock Converse through bedrock_converse)."""
    for name in ("stop_reason", "matched_stop"):
        value = choice.get(name)
        if isinstance(value, str):
            return value
    return None


def stop_reason_of(
    finish_reason: Any, matched_stop: str | None, called_tools: bool
) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for a chat finish_reason."""
    # Some compatible servers finish tool calls with "stop"; the client must still see tool_use.
    if called_tools and finish_reason in ("stop", None):
        return "tool_use", None
    mapped = _STOP_REASONS.get(finish_reason)
    if mapped is not None:
        return mapped, None
    if matched_stop is not None:
        return "stop_sequence", matched_stop or None
    # Plain OpenAI does not say whether "stop" came from a stop sequence; end_turn is the honest default.
    return "end_turn", None


def usage_of(usage: Any) -> dict[str, int]:
    """Chat usage as Messages usage: cached prompt tokens are reported apart from input_tokens."""
    if not isinstance(usage, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    prompt = usage.get("prompt_tokens") or 0
    details = usage.get("prompt_tokens_details")
    cached = (details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return {
        "input_tokens": prompt - cached,
        "output_tokens": usage.get("completion_tokens") or 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }
