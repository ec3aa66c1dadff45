"""Claude on Vertex in GeminiFake: `:rawPredict` and `:streamRawPredict` answer Anthropic's Messages format
(echo model; with tools, a `tool_use` of the first tool until a `tool_result` comes back), after checking
the body Vertex wants: `anthropic_version: vertex-2023-10-16`, no `model`, messages and max_tokens.
`count-tokens:rawPredict` counts words. Usage is fixed: CLAUDE_USAGE."""

from __future__ import annotations

import os
from typing import Any

import orjson
from aiohttp import web

from .gemini_state import STATE, google_error
from .schema_answer import schema_answer

CLAUDE_USAGE = {"input_tokens": 13, "output_tokens": 4}


def _anthropic_error(status: int, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return web.json_response(body, status=status)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(
        b.get("text", "") for b in content or () if isinstance(b, dict) and b.get("type") == "text"
    )


def _message(body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    last = messages[-1]
    results = [b for b in last.get("content") or () if isinstance(b, dict) and b.get("type") == "tool_result"]
    user_text = next(
        (_text(m["content"]) for m in reversed(messages) if m["role"] == "user" and _text(m["content"])), ""
    )
    tools = body.get("tools") or []
    choice = body.get("tool_choice") or {}
    forced = [t for t in tools if choice.get("type") == "tool" and t["name"] == choice.get("name")]
    if forced and not results:  # a forced tool (structured output): a value of its schema
        call = {"type": "tool_use", "id": "toolu_" + os.urandom(8).hex(), "name": forced[0]["name"]}
        content = [{**call, "input": schema_answer(forced[0].get("input_schema"), user_text)}]
        stop = "tool_use"
    elif results:
        content = [{"type": "text", "text": "tool said: " + _text(results[0].get("content"))}]
        stop = "end_turn"
    elif tools:
        call = {"type": "tool_use", "id": "toolu_" + os.urandom(8).hex(), "name": tools[0]["name"]}
        content = [{**call, "input": {"text": user_text}}]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": f"echo: {user_text}"}]
        stop = "end_turn"
    return {
        "id": "msg_vrtx_" + os.urandom(8).hex(),
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": dict(CLAUDE_USAGE),
    }


def _event(name: str, payload: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **payload}) + b"\n\n"


async def _stream(
    request: web.Request, message: dict[str, Any], whole_usage: bool = False
) -> web.StreamResponse:
    reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await reply.prepare(request)
    opening = (
        {**message["usage"], "output_tokens": 1} if whole_usage else {"input_tokens": 13, "output_tokens": 1}
    )
    start = {**message, "content": [], "stop_reason": None, "usage": opening}
    frames = [_event("message_start", {"message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            frames.append(
                _event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            frames.append(_event("content_block_start", {"index": index, "content_block": opened}))
            delta = {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}
        frames.append(_event("content_block_delta", {"index": index, "delta": delta}))
        frames.append(_event("content_block_stop", {"index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    frames.append(
        _event(
            "message_delta",
            {
                "delta": stop,
                "usage": message["usage"]
                if whole_usage
                else {"output_tokens": CLAUDE_USAGE["output_tokens"]},
            },
        )
    )
    frames.append(_event("message_stop", {}))
    for frame in frames:
        await reply.write(frame)
    await reply.write_eof()
    return reply


def _problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if body.get("anthropic_version") != "vertex-2023-10-16":
        return f"anthropic_version: expected vertex-2023-10-16, got {body.get('anthropic_version')!r}"
    if "model" in body:
        return "model: Extra inputs are not permitted"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "messages: Field required"
    return None


async def claude_answer(request: web.Request, body_bytes: bytes, action: str) -> web.StreamResponse:
    """A Claude model's answer to `:rawPredict` or `:streamRawPredict`."""
    try:
        body = orjson.loads(body_bytes)
    except orjson.JSONDecodeError:
        return _anthropic_error(400, "the body is not JSON")
    if problem := _problem(body):
        return _anthropic_error(400, problem)
    if not isinstance(body.get("max_tokens"), int):
        return _anthropic_error(400, "max_tokens: Field required")
    stream = body.get("stream") is True
    if action != ("streamRawPredict" if stream else "rawPredict"):
        return google_error(400, "INVALID_ARGUMENT", f"{action} does not match stream={stream}")
    message = _message(body)
    reported = request.app[STATE].report_claude_usage
    if reported is not None:
        message["usage"] = reported
    return await _stream(request, message, reported is not None) if stream else web.json_response(message)


def count_tokens_answer(body_bytes: bytes) -> web.Response:
    """`count-tokens:rawPredict`: the body keeps its model; words are tokens."""
    body = orjson.loads(body_bytes)
    if problem := _problem({k: v for k, v in body.items() if k != "model"}):
        return _anthropic_error(400, problem)
    if not isinstance(body.get("model"), str):
        return _anthropic_error(400, "model: Field required")
    words = sum(len(_text(m["content"]).split()) for m in body["messages"])
    return web.json_response({"input_tokens": words})
