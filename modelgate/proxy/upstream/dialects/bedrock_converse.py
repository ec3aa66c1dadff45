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
from modelgate.proxy.translation.field_matrix import CHAT_ON_CONVERSE
from modelgate.proxy.translation.field_rules import FieldRefused, check_fields
from modelgate.proxy.translation.reasoning import claude_thinking
from modelgate.proxy.translation.sse import DONE_FRAME, data_frame
from modelgate.proxy.translation.structured_output import ANSWER_TOOL, AnswerTool, answer_tool_of
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
# The output limit a thinking request gets when the client named none (thinking needs a limit to fit in).
CONVERSE_DEFAULT_MAX_TOKENS = 4096
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
    check_fields(chat, CHAT_ON_CONVERSE.fields)
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
    if metadata := _request_metadata(chat):
        converse["requestMetadata"] = metadata
    if (effort := chat.get("reasoning_effort")) is not None:
        _add_reasoning(converse, effort, str(chat.get("model") or ""))
    return converse


def _request_metadata(chat: dict[str, Any]) -> dict[str, str]:
    """`user`, `safety_identifier` and the `metadata` pairs as Converse's `requestMetadata` (string pairs
    Bedrock keeps with the invocation's log)."""
    metadata = chat.get("metadata")
    pairs: dict[str, str] = {}
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise InvalidRequest("'metadata' must be an object of strings")
        pairs.update(metadata)
    for name in ("user", "safety_identifier"):
        if isinstance(chat.get(name), str) and chat[name]:
            pairs[name] = chat[name]
    return pairs


def _add_reasoning(converse: dict[str, Any], effort: Any, model: str) -> None:
    """Claude models on Converse think with `thinking` among the additional model fields; other models'
    reasoning settings differ per family and are not translated."""
    if "anthropic." not in model:
        raise FieldRefused(
            "reasoning_effort", f"reasoning is translated for Claude models only, not {model!r}"
        )
    inference = converse.setdefault("inferenceConfig", {})
    thinking = claude_thinking(effort, int(inference.get("maxTokens") or CONVERSE_DEFAULT_MAX_TOKENS))
    if thinking is None:
        return
    inference.setdefault("maxTokens", CONVERSE_DEFAULT_MAX_TOKENS)
    converse["additionalModelRequestFields"] = {"thinking": thinking}


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
    answer = answer_tool_of(chat.get("response_format"), [tool["toolSpec"]["name"] for tool in tools])
    if answer is not None:
        return _answer_tool_config(answer, tools, choice)
    uses_tools = any("toolUse" in block or "toolResult" in block for m in messages for block in m["content"])
    if not tools or (choice == "none" and not uses_tools):
        return None  # Converse has no "none": without tools the model cannot call one
    config: dict[str, Any] = {"tools": tools}
    if choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif choice == "required":
        config["toolChoice"] = {"any": {}}
    elif isinstance(choice, dict):
        config["toolChoice"] = {"tool": {"name": _named(choice)}}
    return config


def _named(choice: dict[str, Any]) -> str:
    name = (choice.get("function") or {}).get("name")
    if not name:
        raise InvalidRequest("tool_choice must name a function")
    return name


def _answer_tool_config(answer: AnswerTool, tools: list[dict[str, Any]], choice: Any) -> dict[str, Any]:
    """Structured output as Converse takes it: the answer tool (structured_output.py) beside the client's
    tools, and a tool choice that makes the model call a tool (that one, unless the client's may be
    called)."""
    spec = {"name": ANSWER_TOOL, "description": answer.description, "inputSchema": {"json": answer.schema}}
    if isinstance(choice, dict):
        forced = {"tool": {"name": _named(choice)}}
    elif tools and choice != "none":
        forced = {"any": {}}
    else:
        forced = {"tool": {"name": ANSWER_TOOL}}
    return {"tools": [*tools, {"toolSpec": spec}], "toolChoice": forced}


# -- the answer ----------------------------------------------------------------------------------------


def chat_usage(usage: Any) -> dict[str, Any]:
    """Converse's `TokenUsage` as a chat completion's `usage`. Converse counts cache reads and writes
    beside `inputTokens` (as Anthropic does); chat's `prompt_tokens` includes them, with the reads as
    `cached_tokens` and the writes as `cache_write_tokens` in its details (their 1-hour part, from
    `cacheDetails`, as `cache_write_tokens_details.ttl_1h_tokens`)."""
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
        details: dict[str, Any] = {"cached_tokens": read, "cache_write_tokens": written}
        # `cacheDetails`: the writes by TTL ("5m", "1h"); the 1-hour ones are charged at their own rate.
        hour = 0
        split = usage.get("cacheDetails")
        if isinstance(split, list):
            for part in split:
                if isinstance(part, dict) and part.get("ttl") == "1h":
                    hour += int(part.get("inputTokens") or 0)
        if hour:
            details["cache_write_tokens_details"] = {"ttl_1h_tokens": min(hour, written)}
        chat["prompt_tokens_details"] = details
    return chat


def converse_to_chat(
    answer: dict[str, Any], model: str, completion_id: str, structured: bool = False
) -> dict[str, Any]:
    """A chat completion for a Converse answer; `structured`: the request asked for structured output, so a
    call of the answer tool is the answer's text."""
    message = (answer.get("output") or {}).get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise broken("Converse answer without output.message.content")
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    structured_answer: str | None = None
    reasoning: list[str] = []  # as `reasoning_content` (chat's de facto place; signatures have none)
    for block in message["content"]:
        if not isinstance(block, dict):
            raise broken("Converse content block is not an object")
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block.get("reasoningContent"), dict):
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            reasoning.append(text if isinstance(text, str) else "")
        elif (
            isinstance(block.get("toolUse"), dict)
            and structured
            and block["toolUse"].get("name") == ANSWER_TOOL
        ):
            structured_answer = orjson.dumps(block["toolUse"].get("input", {})).decode()
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
    finish_reason = FINISH_REASONS.get(answer.get("stopReason", ""), "stop")
    if structured_answer is not None and not tool_calls:
        texts = [structured_answer]  # words before the answer tool's call are not part of the JSON
        finish_reason = "stop" if finish_reason == "tool_calls" else finish_reason
    reply: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not tool_calls else None,
    }
    if tool_calls:
        reply["tool_calls"] = tool_calls
    if any(reasoning):
        reply["reasoning_content"] = "".join(reasoning)
    choice: dict[str, Any] = {"index": 0, "message": reply, "finish_reason": finish_reason, "logprobs": None}
    if answer.get("stopReason") == "stop_sequence":
        choice["stop_reason"] = _matched_stop(answer)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": chat_usage(answer.get("usage")),
    }


def _matched_stop(answer: dict[str, Any]) -> str:
    """The stop sequence that ended a Converse answer, as vLLM names it in a chat choice's `stop_reason`
    (messages_to_chat reads it): Claude models report it among the additional fields; "" when unknown, so
    that a Messages client still learns the answer stopped at a stop sequence."""
    extra = answer.get("additionalModelResponseFields")
    matched = extra.get("stop_sequence") if isinstance(extra, dict) else None
    return matched if isinstance(matched, str) else ""


class ConverseStreamToChat(EventStreamTransform):
    """A ConverseStream answer as `chat.completion.chunk` server-sent events, ending with `data: [DONE]`;
    the usage chunk (no choices) only when the request asked for it."""

    def __init__(self, model: str, completion_id: str, want_usage: bool, structured: bool = False) -> None:
        super().__init__()
        self._structured = structured
        self._answer_block = -1  # the content block index of the answer tool's call, once it opened
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
            if self._structured and use.get("name") == ANSWER_TOOL:
                self._answer_block = _block_index(payload)
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
                arguments = str(delta["toolUse"].get("input", ""))
                if _block_index(payload) == self._answer_block:
                    return self._chunk({"content": arguments}) if arguments else b""
                index = self._tools.setdefault(_block_index(payload), len(self._tools))
                return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
            reasoning = delta.get("reasoningContent")
            if isinstance(reasoning, dict) and isinstance(reasoning.get("text"), str) and reasoning["text"]:
                return self._chunk({"reasoning_content": reasoning["text"]})
            return b""  # signatures, citations: not carried by chat chunks
        if name == "messageStop":
            self._stopped = True
            finish_reason = FINISH_REASONS.get(payload.get("stopReason", ""), "stop")
            if self._answer_block >= 0 and not self._tools and finish_reason == "tool_calls":
                finish_reason = "stop"
            choice = {"index": 0, "delta": {}, "finish_reason": finish_reason, "logprobs": None}
            if payload.get("stopReason") == "stop_sequence":
                choice["stop_reason"] = _matched_stop(payload)
            return data_frame({**self._head, "choices": [choice]})
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
