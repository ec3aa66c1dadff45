"""A Responses API request as a chat completion request, and a chat completion as a Response.

Pure functions on parsed JSON; `responses_on_chat` wires them to the forwarder, on top of the chat
translators (Anthropic-kind rows) or the dialects that take a chat request (Bedrock Converse, Gemini,
Vertex). A translated row keeps no state between calls: what needs a stored response (`store`,
`previous_response_id`, `conversation`, `background`, stored prompts) is refused (docs/translation-fields.md).
"""

from __future__ import annotations

import os
import time
from typing import Any

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.field_matrix import LOGPROBS_INCLUDE, RESPONSES_ON_CHAT
from modelgate.proxy.translation.field_rules import FieldRefused, check_fields

# Responses item `role` → chat message role (a `developer` message stays one: the chat translators read it
# as the system prompt).
_ROLES = {"user": "user", "system": "system", "developer": "developer", "assistant": "assistant"}
_CHOICES = ("auto", "none", "required")
# Chat `finish_reason` → the reason a Response is `incomplete`.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
# Fields copied as they are: the chat request has a field of the same name and meaning.
_SAME_NAME = (
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
    "service_tier",
    "metadata",
)


def new_response_id() -> str:
    """A fresh `resp_…` id; a translated response is stored nowhere, so it names nothing to fetch."""
    return "resp_" + os.urandom(12).hex()


def new_item_id(prefix: str) -> str:
    return f"{prefix}_" + os.urandom(12).hex()


# -- request -----------------------------------------------------------------------------------------


def chat_request_of(payload: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    """The chat completion request for a Responses request (docs/translation-fields.md)."""
    check_fields(payload, RESPONSES_ON_CHAT.fields)
    messages: list[dict[str, Any]] = []
    instructions = payload.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise FieldRefused("instructions", "must be a string on this provider")
        messages.append({"role": "system", "content": instructions})
    messages.extend(chat_messages_of(payload.get("input")))
    chat: dict[str, Any] = {"model": upstream_model, "messages": messages}
    for name in _SAME_NAME:
        if payload.get(name) is not None:
            chat[name] = payload[name]
    if payload.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = payload["max_output_tokens"]
    if payload.get("include") == [LOGPROBS_INCLUDE]:
        chat["logprobs"] = True
    if payload.get("top_logprobs"):
        chat["top_logprobs"] = payload["top_logprobs"]
    tools = payload.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise InvalidRequest("'tools' must be an array")
        chat["tools"] = [_function_tool_of(tool) for tool in tools]
    choice = payload.get("tool_choice")
    if choice is not None:
        chat["tool_choice"] = _tool_choice_of(choice)
    chat.update(_text_config_of(payload.get("text")))
    reasoning = payload.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise InvalidRequest("'reasoning' must be an object")
        if reasoning.get("effort") is not None:
            chat["reasoning_effort"] = reasoning["effort"]
    if payload.get("stream"):
        chat["stream"] = True
        # The Response's usage comes from the chat stream's last chunk, asked for here.
        chat["stream_options"] = {"include_usage": True}
    return chat


def chat_messages_of(input_: Any) -> list[dict[str, Any]]:
    """The `input` (a string, or a list of items) as chat messages: an assistant message and the function
    calls after it become one assistant message with `tool_calls`, each function call output a `tool`
    message."""
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    if not isinstance(input_, list) or not input_:
        raise InvalidRequest("'input' must be a string or a non-empty array of input items")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(input_):
        if not isinstance(item, dict):
            raise InvalidRequest(f"input[{index}] must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message_of(item, index))
        elif kind == "function_call":
            call = {
                "id": _string(item, "call_id", index),
                "type": "function",
                "function": {
                    "name": _string(item, "name", index),
                    "arguments": item.get("arguments") or "{}",
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _parts_of(output, index)
            messages.append(
                {"role": "tool", "tool_call_id": _string(item, "call_id", index), "content": content}
            )
        elif kind == "reasoning":
            continue  # an earlier answer's reasoning: chat has no place for it (as Messages thinking)
        else:
            raise FieldRefused("input", f"input items of type {kind!r} are not translated")
    return messages


def _string(item: dict[str, Any], name: str, index: int) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"input[{index}].{name} must be a non-empty string")
    return value


def _message_of(item: dict[str, Any], index: int) -> dict[str, Any]:
    role = _ROLES.get(str(item.get("role")))
    if role is None:
        raise InvalidRequest(f"input[{index}].role must be one of user, assistant, system, developer")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if role == "assistant":  # an earlier answer's output_text (and refusal) parts, as its text
        texts = [
            part.get("text") or part.get("refusal") or ""
            for part in content or ()
            if isinstance(part, dict) and part.get("type") in ("output_text", "refusal", "input_text")
        ]
        return {"role": role, "content": "".join(texts)}
    return {"role": role, "content": _parts_of(content, index)}


def _parts_of(content: Any, index: int) -> list[dict[str, Any]]:
    """Input content parts as chat content parts; the chat translators then decide what each provider
    takes (an image by URL where the provider fetches it, inline bytes elsewhere)."""
    if not isinstance(content, list):
        raise InvalidRequest(f"input[{index}].content must be a string or an array of content parts")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": part.get("text") or ""})
        elif kind == "input_image":
            if part.get("file_id"):
                raise FieldRefused("input", "an image by file_id is not translated (send its URL or bytes)")
            if not isinstance(part.get("image_url"), str):
                raise InvalidRequest(f"input[{index}]: an input_image needs an 'image_url'")
            image = {"url": part["image_url"]}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file":
            if not isinstance(part.get("file_data"), str):
                raise FieldRefused(
                    "input", "a file by file_id or file_url is not translated (send its bytes)"
                )
            file = {"file_data": part["file_data"]}
            if isinstance(part.get("filename"), str):
                file["filename"] = part["filename"]
            parts.append({"type": "file", "file": file})
        elif kind == "input_audio":
            parts.append({"type": "input_audio", "input_audio": part.get("input_audio")})
        else:
            raise FieldRefused("input", f"content parts of type {kind!r} are not translated")
    return parts


def _function_tool_of(tool: Any) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise FieldRefused("tools", f"the built-in tool {kind!r} is not translated (function tools are)")
    function: dict[str, Any] = {"name": tool.get("name") or ""}
    for name in ("description", "parameters", "strict"):
        if tool.get(name) is not None:
            function[name] = tool[name]
    return {"type": "function", "function": function}


def _tool_choice_of(choice: Any) -> Any:
    if choice in _CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raise FieldRefused("tool_choice", f"{kind!r} is not translated (auto, none, required or a function are)")


def _text_config_of(text: Any) -> dict[str, Any]:
    """`text.format` as `response_format`, `text.verbosity` as `verbosity` (which the chat translators
    then carry or refuse)."""
    if text is None:
        return {}
    if not isinstance(text, dict):
        raise InvalidRequest("'text' must be an object")
    chat: dict[str, Any] = {}
    if text.get("verbosity") is not None:
        chat["verbosity"] = text["verbosity"]
    form = text.get("format")
    if form is None:
        return chat
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        spec = {name: form[name] for name in ("name", "schema", "strict", "description") if name in form}
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif kind != "text":
        raise FieldRefused("text", f"format type {kind!r} is not translated")
    return chat


def asks_structured_output(payload: dict[str, Any]) -> bool:
    """Whether a Responses request asked for JSON (`text.format` json_schema or json_object)."""
    text = payload.get("text")
    form = text.get("format") if isinstance(text, dict) else None
    return isinstance(form, dict) and form.get("type") in ("json_schema", "json_object")


# -- answer ------------------------------------------------------------------------------------------


def response_of(completion: dict[str, Any], model: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The Response for a complete chat completion; `model` is the name the client asked for."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        output.append(reasoning_item(new_item_id("rs"), reasoning))
    text = message.get("content")
    if isinstance(text, str) and (text or not message.get("tool_calls")):
        logprobs = output_logprobs_of(choice.get("logprobs"))
        output.append(message_item(new_item_id("msg"), text, "completed", logprobs))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        output.append(
            function_call_item(
                new_item_id("fc"), call.get("id") or "", function.get("name") or "", function.get("arguments")
            )
        )
    finish_reason = choice.get("finish_reason")
    return response_object(
        new_response_id(),
        model,
        payload,
        output,
        finish_reason,
        usage_of(completion.get("usage")),
        completion.get("created"),
    )


def response_object(
    response_id: str,
    model: str,
    payload: dict[str, Any],
    output: list[dict[str, Any]],
    finish_reason: str | None,
    usage: dict[str, Any] | None,
    created: Any = None,
) -> dict[str, Any]:
    """A Response as the API writes one (`finish_reason` None: still in progress), echoing what the client
    asked for."""
    incomplete = _INCOMPLETE.get(finish_reason) if finish_reason else None
    status = "in_progress" if finish_reason is None else "incomplete" if incomplete else "completed"
    text = payload.get("text")
    text_format = text.get("format") if isinstance(text, dict) else None
    reasoning = payload.get("reasoning")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created if isinstance(created, int) else int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": payload.get("instructions"),
        "max_output_tokens": payload.get("max_output_tokens"),
        "metadata": payload.get("metadata") or {},
        "model": model,
        "output": output,
        "parallel_tool_calls": payload.get("parallel_tool_calls") is not False,
        "previous_response_id": None,
        "reasoning": reasoning if isinstance(reasoning, dict) else None,
        "service_tier": payload.get("service_tier"),
        "store": False,
        "temperature": payload.get("temperature"),
        "text": {"format": text_format or {"type": "text"}},
        "tool_choice": payload.get("tool_choice") or "auto",
        "tools": payload.get("tools") or [],
        "top_p": payload.get("top_p"),
        "truncation": "disabled",
        "usage": usage,
        "user": payload.get("user"),
    }


def message_item(
    item_id: str, text: str, status: str, logprobs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": [part]}


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    """Chat's reasoning text (Claude's thinking, Gemini's thought summary) as the item's summary."""
    return {"id": item_id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}


def function_call_item(item_id: str, call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else "{}",
    }


def output_logprobs_of(logprobs: Any) -> list[dict[str, Any]]:
    """A chat choice's `logprobs` as an `output_text`'s: the same tokens, log probabilities, bytes and
    alternatives."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return []
    return [
        {
            "token": token.get("token", ""),
            "logprob": token.get("logprob", 0.0),
            "bytes": token.get("bytes") or [],
            "top_logprobs": [
                {
                    "token": alt.get("token", ""),
                    "logprob": alt.get("logprob", 0.0),
                    "bytes": alt.get("bytes") or [],
                }
                for alt in token.get("top_logprobs") or ()
                if isinstance(alt, dict)
            ],
        }
        for token in content
        if isinstance(token, dict)
    ]


def usage_of(usage: Any) -> dict[str, Any] | None:
    """Chat usage as Response usage (input tokens include the cached ones in both)."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else 0
    reasoning = completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached or 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning or 0},
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }
