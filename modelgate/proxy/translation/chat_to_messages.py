"""A chat completion request as a Messages request, and a Message as a chat completion answer.

Pure functions on parsed JSON; `chat_on_anthropic` wires them to the forwarder.
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.field_matrix import CHAT_ON_MESSAGES
from modelgate.proxy.translation.field_rules import FieldRefused, check_fields
from modelgate.proxy.translation.images import image_block_of
from modelgate.proxy.translation.messages_to_chat import tool_input_of
from modelgate.proxy.translation.reasoning import claude_thinking
from modelgate.proxy.translation.structured_output import (
    ANSWER_TOOL,
    OPEN_OBJECT,
    answer_tool_of,
    requested_schema,
)

# Messages `stop_reason` → chat `finish_reason`; the rest (end_turn, stop_sequence, pause_turn) is "stop".
FINISH_REASONS: dict[object, str] = {
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_EMPTY_SCHEMA = {"type": "object", "properties": {}}
# Chat allows temperatures up to 2, Messages up to 1; clamping beats a 400 for a merely hotter request.
_MAX_TEMPERATURE = 1.0


def new_completion_id() -> str:
    """A fresh `chatcmpl-…` id for a translated answer."""
    return "chatcmpl-" + os.urandom(12).hex()


# -- request -----------------------------------------------------------------------------------------


def messages_request_of(
    payload: dict[str, Any], upstream_model: str, default_max_tokens: int
) -> dict[str, Any]:
    """The Messages request for a chat completion request (docs/translation-fields.md); Messages requires
    `max_tokens`, so the model's default fills in when the client sets none."""
    check_fields(payload, CHAT_ON_MESSAGES.fields)
    system, turns = _turns_of(payload.get("messages"))
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens") or default_max_tokens
    request: dict[str, Any] = {"model": upstream_model, "max_tokens": limit, "messages": turns}
    if system:
        request["system"] = system
    thinking = claude_thinking(payload.get("reasoning_effort"), limit)
    temperature = payload.get("temperature")
    if isinstance(temperature, int | float):
        if thinking is not None and temperature != 1:
            raise FieldRefused(
                "temperature", "Claude takes no temperature while it thinks (reasoning_effort)"
            )
        request["temperature"] = min(temperature, _MAX_TEMPERATURE)
    if payload.get("top_p") is not None:
        request["top_p"] = payload["top_p"]
    stop = payload.get("stop")
    if stop:
        request["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    tools = payload.get("tools")
    if tools:
        request["tools"] = [_tool_of(tool) for tool in tools]
    choice = _tool_choice_of(payload.get("tool_choice"))
    if thinking is not None:
        request["thinking"] = thinking
        _output_format_while_thinking(payload.get("response_format"), request)
        if choice is not None and choice["type"] in ("any", "tool"):
            raise FieldRefused("tool_choice", "Claude cannot be made to call a tool while it thinks")
    elif answer := answer_tool_of(
        payload.get("response_format"), [t["name"] for t in request.get("tools", ())]
    ):
        request.setdefault("tools", []).append(
            {"name": ANSWER_TOOL, "description": answer.description, "input_schema": answer.schema}
        )
        choice = _choice_with_answer_tool(choice, bool(tools))
    if request.get("tools") and payload.get("parallel_tool_calls") is False:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        request["tool_choice"] = choice
    user = payload.get("user") or payload.get("safety_identifier")
    if isinstance(user, str) and user:
        request["metadata"] = {"user_id": user}
    tier = payload.get("service_tier")
    if tier is not None:
        request["service_tier"] = "auto" if tier == "auto" else "standard_only"
    if payload.get("stream"):
        request["stream"] = True
    return request


def _output_format_while_thinking(response_format: Any, request: dict[str, Any]) -> None:
    """Structured output while Claude thinks: a forced tool is refused then, so the schema goes as Claude's
    own structured output (`output_config.format`), which holds every object to its listed properties."""
    schema = requested_schema(response_format)
    if schema is None:
        return
    if schema is OPEN_OBJECT or not schema.get("properties"):
        raise FieldRefused(
            "response_format",
            "Claude's structured output while it thinks needs a json_schema with properties",
        )
    request["output_config"] = {"format": {"type": "json_schema", "schema": schema}}


def _turns_of(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, turns): system messages are lifted out, consecutive same-role turns merged."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array")
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict):
            raise InvalidRequest("each message must be an object")
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_plain_text(content))
        elif role == "user":
            _add(turns, "user", _user_blocks(content))
        elif role == "assistant":
            _add(turns, "assistant", _assistant_blocks(message))
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id", ""),
                "content": _plain_text(content),
            }
            # Messages wants every result of one assistant turn in the single user turn that follows.
            _add(turns, "user", [result])
        else:
            raise InvalidRequest(f"message role {role!r} cannot be sent to this model's providers")
    for turn in turns:
        blocks = turn["content"]
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            turn["content"] = blocks[0]["text"]
    return "\n".join(system), turns


def _add(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRequest("a user message needs 'content' (a string or an array of parts)")
    blocks: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            blocks.append(image_block_of(part))
        else:
            raise InvalidRequest(f"content part type {kind!r} cannot be sent to this model's providers")
    return blocks


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    text = content if isinstance(content, str) else _plain_text(content)
    # Messages refuses empty text blocks, and an assistant turn that only called tools has none.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "input": tool_input_of(function.get("arguments")),
            }
        )
    return blocks


def _tool_of(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function") if tool.get("type") == "function" else None
    if not isinstance(function, dict):
        raise InvalidRequest(f"tool type {tool.get('type')!r} cannot be sent to this model's providers")
    converted: dict[str, Any] = {"name": function.get("name", "")}
    if function.get("description"):
        converted["description"] = function["description"]
    converted["input_schema"] = function.get("parameters") or _EMPTY_SCHEMA
    return converted


def _choice_with_answer_tool(choice: dict[str, Any] | None, client_tools: bool) -> dict[str, Any]:
    """The tool choice once the answer tool is offered: the model must call a tool, the answer tool alone
    when the client's tools may not be called, the client's named tool when it named one."""
    kind = choice.get("type") if choice else None
    if not client_tools or kind == "none":
        return {"type": "tool", "name": ANSWER_TOOL}
    if kind == "tool":
        return choice  # type: ignore[return-value]  # a named tool: kind is "tool" only when choice is set
    return {"type": "any"}


def _tool_choice_of(choice: Any) -> dict[str, Any] | None:
    if choice == "required":
        return {"type": "any"}
    if choice in ("auto", "none"):
        return {"type": choice}
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and function.get("name"):
            return {"type": "tool", "name": function["name"]}
    return None


# -- answer ------------------------------------------------------------------------------------------


def completion_of(message: dict[str, Any], model: str, structured: bool = False) -> dict[str, Any]:
    """The chat completion for a complete Message; `model` is the name the client asked for. `structured`:
    the request asked for structured output, so a call of the answer tool is the answer's text."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    structured_answer: str | None = None
    reasoning: list[str] = []  # thinking, as `reasoning_content` (chat's de facto place; no signatures)
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif kind == "tool_use" and structured and block.get("name") == ANSWER_TOOL:
            structured_answer = orjson.dumps(block.get("input") or {}).decode()
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            function = {"name": block.get("name", ""), "arguments": arguments}
            calls.append({"id": block.get("id", ""), "type": "function", "function": function})
    finish_reason = FINISH_REASONS.get(message.get("stop_reason"), "stop")
    if structured_answer is not None and not calls:
        # Words the model wrote before calling the answer tool are not part of the JSON answer.
        texts = [structured_answer]
        if finish_reason == "tool_calls":
            finish_reason = "stop"
    answer: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
        "refusal": None,
    }
    if calls:
        answer["tool_calls"] = calls
    if reasoning:
        answer["reasoning_content"] = "".join(reasoning)
    choice = {
        "index": 0,
        "message": answer,
        "logprobs": None,
        "finish_reason": finish_reason,
    }
    return {
        "id": new_completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": chat_usage_of(message.get("usage")),
    }


def chat_usage_of(usage: Any) -> dict[str, Any]:
    """Messages usage as chat usage: prompt tokens include the cached and cache-written ones."""
    usage = usage if isinstance(usage, dict) else {}
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached + (usage.get("cache_creation_input_tokens") or 0)
    completion = usage.get("output_tokens") or 0
    chat = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    details = usage.get("output_tokens_details")
    if isinstance(details, dict) and details.get("thinking_tokens"):
        chat["completion_tokens_details"] = {"reasoning_tokens": details["thinking_tokens"]}
    return chat
