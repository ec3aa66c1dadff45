"""Anthropic `POST /v1/messages` (plain and streamed) and `POST /v1/messages/count_tokens`."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson
from aiohttp import web

from .context import CONTEXT, FakeContext, answered_model, fault_of, json_body, required
from .echo_model import (
    Reply,
    ToolCall,
    awaits_answer_to_user,
    content_text,
    echo_reply,
    last_user_text,
    new_id,
    plan_tool_calls,
    prompt_tokens,
    split_pieces,
    stop_list,
    word_count,
)
from .envelopes import UpstreamError, json_response
from .schema_answer import schema_answer
from .sse import SseScript, event_frame, play

_STOP_REASONS = {"end": "end_turn", "length": "max_tokens", "stop": "stop_sequence"}


def _messages(body: dict[str, Any]) -> list[Any]:
    messages = required(body, "messages", list)
    if not messages:
        raise UpstreamError(400, "messages: at least one message is required", param="messages")
    return messages


def _tool_names(body: dict[str, Any]) -> list[str]:
    choice = body.get("tool_choice")
    if (isinstance(choice, dict) and choice.get("type") == "none") or not isinstance(body.get("tools"), list):
        return []
    # Client tools only: server tools (web search, …) carry a versioned `type` and no input schema.
    return [
        t["name"]
        for t in body["tools"]
        if isinstance(t, dict) and isinstance(t.get("name"), str) and t.get("type") in (None, "custom")
    ]


def _forced_call(body: dict[str, Any], user_text: str) -> list[ToolCall]:
    """A tool named by `tool_choice`, called with a value of its input schema (how structured output is
    asked of Claude through a tool)."""
    choice = body.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") != "tool":
        return []
    tool = next((t for t in body.get("tools") or () if t.get("name") == choice.get("name")), None)
    if tool is None:
        raise UpstreamError(400, f"tool_choice names tool {choice.get('name')!r}, which is not in tools")
    return [ToolCall(new_id("toolu_"), tool["name"], schema_answer(tool.get("input_schema"), user_text))]


def _thinking(body: dict[str, Any], user_text: str) -> dict[str, Any] | None:
    config = body.get("thinking")
    if not isinstance(config, dict) or config.get("type") not in ("enabled", "adaptive"):
        return None
    text = f"Thinking about: {user_text}"
    signature = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return {"type": "thinking", "thinking": text, "signature": signature}


def _cached_prefix(body: dict[str, Any], messages: list[Any]) -> str:
    """Text up to and including the last block marked `cache_control` ("" when none is)."""
    system = body.get("system")
    blocks: list[Any] = list(system) if isinstance(system, list) else [{"text": system or ""}]
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        blocks += content if isinstance(content, list) else [{"text": content or ""}]
    texts = [content_text([block]) for block in blocks]
    marked = [i for i, block in enumerate(blocks) if isinstance(block, dict) and block.get("cache_control")]
    return " ".join(texts[: marked[-1] + 1]) if marked else ""


def _input_usage(ctx: FakeContext, body: dict[str, Any], model: str, messages: list[Any]) -> dict[str, int]:
    """Input usage with prompt caching: the first sight of a marked prefix writes it, later ones read it."""
    total = prompt_tokens(messages, body.get("system"))
    prefix = _cached_prefix(body, messages)
    cached = word_count(prefix)
    written = read = 0
    if cached:
        key = hashlib.sha256(f"{model}\n{prefix}".encode()).hexdigest()
        if key in ctx.prompt_cache:
            read = cached
        else:
            written = cached
            ctx.prompt_cache.add(key)
    return {
        "input_tokens": total - cached,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
    }


async def messages(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    body = json_body(request)
    model = answered_model(request, body)
    max_tokens = required(body, "max_tokens", int)
    history = _messages(body)
    user_text = last_user_text(history)
    calls = plan_tool_calls(_tool_names(body), user_text, "toolu_") if awaits_answer_to_user(history) else []
    calls = _forced_call(body, user_text) or calls
    reply = echo_reply(user_text, max_tokens=max_tokens, stops=stop_list(body.get("stop_sequences")))
    output_format = (body.get("output_config") or {}).get("format")
    if isinstance(output_format, dict) and output_format.get("type") == "json_schema":
        # Claude's own structured output: the text is a value of the schema.
        reply = Reply(orjson.dumps(schema_answer(output_format.get("schema"), user_text)).decode(), "end")
    thinking = _thinking(body, user_text)
    blocks: list[dict[str, Any]] = [thinking] if thinking else []
    if calls:
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in calls]
    else:
        blocks.append({"type": "text", "text": reply.text})
    output_tokens = (word_count(thinking["thinking"]) if thinking else 0) + (
        sum(c.tokens for c in calls) if calls else reply.tokens
    )
    message = {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "tool_use" if calls else _STOP_REASONS[reply.finish],
        "stop_sequence": None if calls else reply.stop_sequence,
        "usage": {**_input_usage(ctx, body, model, history), "output_tokens": output_tokens},
    }
    fault = fault_of(request)
    reported = fault.report_usage if fault is not None else None
    if reported:
        message["usage"] = reported["usage"]
    if body.get("stream") is True:
        return await play(request, _message_script(message, calls, bool(reported)))
    return json_response(message)


def _block_frames(index: int, block: dict[str, Any], calls: dict[str, ToolCall]) -> list[bytes]:
    """content_block_start and its deltas (without the stop) for one finished block."""

    def delta(payload: dict[str, Any]) -> bytes:
        frame = {"type": "content_block_delta", "index": index, "delta": payload}
        return event_frame("content_block_delta", frame)

    kind = block["type"]
    if kind == "thinking":
        opening = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [delta({"type": "thinking_delta", "thinking": p}) for p in split_pieces(block["thinking"])]
        deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    elif kind == "tool_use":
        opening = {**block, "input": {}}
        deltas = [
            delta({"type": "input_json_delta", "partial_json": fragment})
            for fragment in calls[block["id"]].argument_fragments()
        ]
    else:
        opening = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": p}) for p in split_pieces(block["text"])]
    start = event_frame(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
    )
    return [start, *deltas]


def _message_script(message: dict[str, Any], calls: list[ToolCall], whole_usage: bool = False) -> SseScript:
    def stop(index: int) -> bytes:
        return event_frame("content_block_stop", {"type": "content_block_stop", "index": index})

    usage = message["usage"]
    opening = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    frames = [event_frame("message_start", {"type": "message_start", "message": opening})]
    by_id = {call.id: call for call in calls}
    last = len(message["content"]) - 1
    for index, block in enumerate(message["content"]):
        frames += _block_frames(index, block, by_id)
        if index == 0:
            # The real API pings once, right after the first block opens.
            frames.insert(2, event_frame("ping", {"type": "ping"}))
        if index != last:
            frames.append(stop(index))
    closing = [
        stop(last),
        event_frame(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
                "usage": usage if whole_usage else {"output_tokens": usage["output_tokens"]},
            },
        ),
        event_frame("message_stop", {"type": "message_stop"}),
    ]
    return SseScript(frames, closing)


async def count_tokens(request: web.Request) -> web.Response:
    body = json_body(request)
    required(body, "model", str)
    return json_response({"input_tokens": prompt_tokens(_messages(body), body.get("system"))})
