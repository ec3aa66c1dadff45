"""Bedrock's Converse API in OpenAI chat terms: a chat request as a Converse request, a Converse answer as a
chat completion, a ConverseStream answer as `chat.completion.chunk` events.

The Converse shapes are botocore's `bedrock-runtime` service model (Converse, ConverseStream): messages of
content blocks (`text`, `image`, `toolUse`, `toolResult`) in strictly alternating user/assistant turns,
system texts apart, tools as `toolConfig`, sampling as `inferenceConfig`.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from modelgate.domain.errors import InvalidRequest
from modelgate.proxy.translation.sse import DONE_FRAME, data_frame
from modelgate.proxy.upstream.dialects.aws_eventstream import EventStreamTransform
from modelgate.proxy.upstream.dialects.base import add_turn, broken

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "content_filtered": "content_filter",
    "guardrail_intervened": "content_filter",
}
IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


# -- the request ---------------------------------------------------------------------------------------


def chat_to_converse(chat: dict[str, Any]) -> dict[str, Any]:
    """The Converse (or ConverseStream) body for a chat completion request; InvalidRequest for what Converse
    cannot carry."""
    if (chat.get("n") or 1) != 1:
        raise InvalidRequest("Bedrock Converse answers one choice: n must be 1")
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    raw_messages = chat.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise InvalidRequest("messages must be a non-empty array")
    for message in raw_messages:
        if not isinstance(message, dict):
            raise InvalidRequest("each message must be an object")
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend({"text": text} for text in _texts(message.get("content"), role) if text)
        elif role == "user":
            add_turn(messages, "user", _user_blocks(message.get("content")), "content")
        elif role == "assistant":
            add_turn(messages, "assistant", _assistant_blocks(message), "content")
        elif role == "tool":
            add_turn(messages, "user", [_tool_result(message)], "content")
        else:
            raise InvalidRequest(f"a message with role {role!r} cannot be sent to Bedrock Converse")
    converse: dict[str, Any] = {"messages": messages}
    if system:
        converse["system"] = system
    if inference := _inference(chat):
        converse["inferenceConfig"] = inference
    if tool_config := _tool_config(chat, messages):
        converse["toolConfig"] = tool_config
    return converse


def _texts(content: Any, role: str) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise InvalidRequest(f"a {role} message's content parts must be text on Bedrock Converse")
            texts.append(part["text"])
        return texts
    raise InvalidRequest(f"a {role} message's content must be a string or an array of parts")


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"text": text} for text in _texts(content, "user") if text]
    blocks: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            if part["text"]:
                blocks.append({"text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image(part.get("image_url")))
        else:
            raise InvalidRequest(
                f"content part {kind!r} cannot be sent to Bedrock Converse (text and images)"
            )
    return blocks


def _image(image_url: Any) -> dict[str, Any]:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url.startswith("data:"):
        raise InvalidRequest("Bedrock Converse takes images inline only: use a data: URL (base64)")
    mime, _, data = url[5:].partition(";base64,")
    image_format = IMAGE_FORMATS.get(mime.lower())
    if image_format is None or not data:
        raise InvalidRequest(
            f"image type {mime!r} is not one Bedrock takes (png, jpeg, gif, webp, as base64)"
        )
    return {"image": {"format": image_format, "source": {"bytes": data}}}


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {"text": text} for text in _texts(message.get("content"), "assistant") if text
    ]
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not call.get("id") or not function.get("name"):
            raise InvalidRequest("each tool call needs an id and a function name")
        try:
            arguments = orjson.loads(function.get("arguments") or "{}")
        except (orjson.JSONDecodeError, TypeError):
            raise InvalidRequest(f"tool call {call['id']}: arguments are not JSON") from None
        if not isinstance(arguments, dict):
            raise InvalidRequest(f"tool call {call['id']}: arguments must be a JSON object for Bedrock")
        blocks.append({"toolUse": {"toolUseId": call["id"], "name": function["name"], "input": arguments}})
    return blocks


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest("a tool message needs its tool_call_id")
    texts = [text for text in _texts(message.get("content"), "tool") if text]
    return {"toolResult": {"toolUseId": call_id, "content": [{"text": text} for text in texts or [""]]}}


def _inference(chat: dict[str, Any]) -> dict[str, Any]:
    inference: dict[str, Any] = {}
    max_tokens = chat.get("max_completion_tokens") or chat.get("max_tokens")
    if max_tokens is not None:
        inference["maxTokens"] = max_tokens
    for name, converse_name in (("temperature", "temperature"), ("top_p", "topP")):
        if chat.get(name) is not None:
            inference[converse_name] = chat[name]
    stop = chat.get("stop")
    if stop:
        inference["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    return inference


def _tool_config(chat: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    tools = []
    for tool in chat.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not function.get("name"):
            raise InvalidRequest("Bedrock Converse takes function tools only, each with a name")
        spec: dict[str, Any] = {
            "name": function["name"],
            "inputSchema": {"json": function.get("parameters") or {"type": "object", "properties": {}}},
        }
        if function.get("description"):
            spec["description"] = function["description"]
        tools.append({"toolSpec": spec})
    choice = chat.get("tool_choice")
    uses_tools = any("toolUse" in block or "toolResult" in block for m in messages for block in m["content"])
    if not tools or (choice == "none" and not uses_tools):
        return None  # Converse has no "none": without tools the model cannot call one
    config: dict[str, Any] = {"tools": tools}
    if choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif choice == "required":
        config["toolChoice"] = {"any": {}}
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if not name:
            raise InvalidRequest("tool_choice must name a function")
        config["toolChoice"] = {"tool": {"name": name}}
    return config


# -- the answer ----------------------------------------------------------------------------------------


def chat_usage(usage: Any) -> dict[str, Any]:
    """Converse's `TokenUsage` as a chat completion's `usage`. Converse counts cache reads and writes
    beside `inputTokens` (as Anthropic does); chat's `prompt_tokens` includes them, with the reads as
    `cached_tokens` and the writes as `cache_write_tokens` in its details."""
    if not isinstance(usage, dict):
        usage = {}
    read = int(usage.get("cacheReadInputTokens") or 0)
    written = int(usage.get("cacheWriteInputTokens") or 0)
    prompt = int(usage.get("inputTokens") or 0) + read + written
    completion = int(usage.get("outputTokens") or 0)
    chat: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": int(usage.get("totalTokens") or prompt + completion),
    }
    if read or written:
        chat["prompt_tokens_details"] = {"cached_tokens": read, "cache_write_tokens": written}
    return chat


def converse_to_chat(answer: dict[str, Any], model: str, completion_id: str) -> dict[str, Any]:
    """A chat completion for a Converse answer."""
    message = (answer.get("output") or {}).get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise broken("Converse answer without output.message.content")
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for block in message["content"]:
        if not isinstance(block, dict):
            raise broken("Converse content block is not an object")
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            tool_calls.append(
                {
                    "id": use.get("toolUseId", ""),
                    "type": "function",
                    "function": {
                        "name": use.get("name", ""),
                        "arguments": orjson.dumps(use.get("input", {})).decode(),
                    },
                }
            )
    reply: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not tool_calls else None,
    }
    if tool_calls:
        reply["tool_calls"] = tool_calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": FINISH_REASONS.get(answer.get("stopReason", ""), "stop"),
                "logprobs": None,
            }
        ],
        "usage": chat_usage(answer.get("usage")),
    }


class ConverseStreamToChat(EventStreamTransform):
    """A ConverseStream answer as `chat.completion.chunk` server-sent events, ending with `data: [DONE]`;
    the usage chunk (no choices) only when the request asked for it."""

    def __init__(self, model: str, completion_id: str, want_usage: bool) -> None:
        super().__init__()
        self._head = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self._want_usage = want_usage
        self._tools: dict[int, int] = {}  # Converse content block index → the chat tool call index
        self._stopped = False

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return data_frame({**self._head, "choices": [choice]})

    def event(self, name: str, payload: dict) -> bytes:
        if name == "messageStart":
            return self._chunk({"role": "assistant", "content": ""})
        if name == "contentBlockStart":
            use = (payload.get("start") or {}).get("toolUse")
            if not isinstance(use, dict):
                return b""
            index = self._tools.setdefault(_block_index(payload), len(self._tools))
            function = {"name": use.get("name", ""), "arguments": ""}
            call = {"index": index, "id": use.get("toolUseId", ""), "type": "function", "function": function}
            return self._chunk({"tool_calls": [call]})
        if name == "contentBlockDelta":
            delta = payload.get("delta") or {}
            if isinstance(delta.get("text"), str):
                return self._chunk({"content": delta["text"]})
            if isinstance(delta.get("toolUse"), dict):
                index = self._tools.setdefault(_block_index(payload), len(self._tools))
                arguments = str(delta["toolUse"].get("input", ""))
                return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
            return b""  # reasoning, citations: not carried by chat chunks
        if name == "messageStop":
            self._stopped = True
            return self._chunk({}, FINISH_REASONS.get(payload.get("stopReason", ""), "stop"))
        if name == "metadata" and self._want_usage:
            return data_frame({**self._head, "choices": [], "usage": chat_usage(payload.get("usage"))})
        return b""

    def end(self) -> bytes:
        if not self._stopped:
            raise broken("ConverseStream ended before messageStop")
        return DONE_FRAME


def _block_index(payload: dict) -> int:
    index = payload.get("contentBlockIndex")
    if not isinstance(index, int):
        raise broken("ConverseStream event without contentBlockIndex")
    return index
