"""OpenAI `POST /v1/chat/completions` and legacy `POST /v1/completions`, plain and streamed."""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from .context import answered_model, fault_of, json_body, optional_int, required
from .echo_model import (
    Reply,
    ToolCall,
    awaits_answer_to_user,
    echo_reply,
    last_user_text,
    new_id,
    plan_tool_calls,
    prompt_tokens,
    stop_list,
    text_inputs,
)
from .envelopes import UpstreamError, json_response
from .schema_answer import schema_answer
from .sse import DONE_FRAME, SseScript, data_frame, play

SYSTEM_FINGERPRINT = "fp_fake_upstream"
# What a provider that reports its price says a request cost (Fault.usage_chunk / provider_cost).
PROVIDER_COST = 0.000123
_FINISH = {"end": "stop", "stop": "stop", "length": "length"}


def openai_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _output_cap(request: web.Request, body: dict[str, Any], *names: str) -> int | None:
    """The request's output cap, validated; None when absent or when the queued fault ignores it."""
    limit = optional_int(body, *names)
    fault = fault_of(request)
    return None if fault is not None and fault.ignore_output_cap else limit


def _function_names(body: dict[str, Any]) -> list[str]:
    if body.get("tool_choice") == "none" or not isinstance(body.get("tools"), list):
        return []
    names = []
    for tool in body["tools"]:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = json_body(request)
    model = answered_model(request, body)
    messages = required(body, "messages", list)
    if not messages:
        raise UpstreamError(400, "Invalid 'messages': empty array.", param="messages")
    user_text = last_user_text(messages)
    calls = []
    if awaits_answer_to_user(messages):
        calls = plan_tool_calls(_function_names(body), user_text, "call_")
    limit = _output_cap(request, body, "max_completion_tokens", "max_tokens")
    reply = echo_reply(user_text, max_tokens=limit, stops=stop_list(body.get("stop")))
    if (structured := _structured_answer(body.get("response_format"), user_text)) is not None:
        reply = Reply(structured, "end")
    # `n` answers of a text reply are the same echo; tool calls are planned for one answer only.
    answers = 1 if calls else _answers(body)
    completion = sum(call.tokens for call in calls) if calls else reply.tokens * answers
    usage = openai_usage(prompt_tokens(messages), completion)
    fault = fault_of(request)
    omit_usage = fault is not None and fault.omit_usage
    finish = "tool_calls" if calls else _FINISH[reply.finish]
    head = {
        "id": new_id("chatcmpl-"),
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    reported = fault.report_usage if fault is not None else None
    if reported:
        usage = reported["usage"]
        head["service_tier"] = reported.get("service_tier", "default")
    shape = fault.usage_chunk if fault is not None else None
    priced = shape is not None or (fault is not None and fault.provider_cost)
    if priced:
        usage = {**usage, "cost": PROVIDER_COST}
    if body.get("stream") is True:
        include_usage = _include_usage(body) and not omit_usage
        script = _chat_script(head, reply, calls, finish, usage, include_usage, answers, shape)
        return await play(request, script)
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else reply.text, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
            for c in calls
        ]
    choices = [
        {"index": i, "message": message, "logprobs": None, "finish_reason": finish} for i in range(answers)
    ]
    answer = {"service_tier": "default", **head, "object": "chat.completion", "choices": choices}
    if not omit_usage:
        answer["usage"] = usage
    if priced:
        answer["cost"] = PROVIDER_COST
    return json_response(answer)


def _structured_answer(response_format: Any, user_text: str) -> str | None:
    """The JSON text of a `json_schema` / `json_object` answer (None for plain text)."""
    if not isinstance(response_format, dict) or response_format.get("type") not in (
        "json_schema",
        "json_object",
    ):
        return None
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema") if response_format["type"] == "json_schema" else None
    return orjson.dumps(
        schema_answer(schema or {"type": "object", "properties": {"text": {}}}, user_text)
    ).decode()


def _answers(body: dict[str, Any]) -> int:
    """How many answers (`n`) the request asks for: 1 to 128, like the real API."""
    n = optional_int(body, "n")
    if n is not None and not 1 <= n <= 128:
        raise UpstreamError(400, "Invalid 'n': expected 1 to 128.", param="n")
    return n or 1


def _chat_script(
    head: dict[str, Any],
    reply: Reply,
    calls: list[ToolCall],
    finish: str,
    usage: dict[str, Any],
    include_usage: bool,
    answers: int = 1,
    shape: str | None = None,
) -> SseScript:
    def frame_of(delta: dict[str, Any], finish_reason: str | None, answer: int) -> dict[str, Any]:
        frame = {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": answer, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if include_usage:
            # Real streams carry `usage: null` on every chunk before the usage chunk.
            frame["usage"] = None
        return frame

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, answer: int = 0) -> bytes:
        return data_frame(frame_of(delta, finish_reason, answer))

    def with_usage(frame: dict[str, Any]) -> bytes:
        if "cost" in usage:  # a provider that prices each request says so beside the usage
            return data_frame({**frame, "usage": usage, "cost": usage["cost"]})
        return data_frame({**frame, "usage": usage})

    if include_usage and shape == "last_content" and not calls and answers == 1:
        *pieces, last = reply.pieces or [""]
        frames = [
            chunk({"role": "assistant", "content": p} if i == 0 else {"content": p})
            for i, p in enumerate(pieces)
        ]
        last_delta = {"content": last} if pieces else {"role": "assistant", "content": last}
        return SseScript(frames, [with_usage(frame_of(last_delta, finish, 0)), DONE_FRAME])

    frames: list[bytes] = []
    for index, call in enumerate(calls):
        function = {"name": call.name, "arguments": ""}
        opening: dict[str, Any] = {
            "tool_calls": [{"index": index, "id": call.id, "type": "function", "function": function}]
        }
        frames.append(chunk({"role": "assistant", "content": None, **opening} if index == 0 else opening))
        frames += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            for fragment in call.argument_fragments()
        ]
    if not calls:
        pieces = reply.pieces or [""]
        # The answers of `n` interleave word by word, as real streams interleave their choices.
        frames += [
            chunk({"role": "assistant", "content": p} if i == 0 else {"content": p}, answer=a)
            for i, p in enumerate(pieces)
            for a in range(answers)
        ]
    closing = [chunk({}, finish, answer=a) for a in range(answers)]
    if include_usage and shape == "empty_choice":
        closing.append(with_usage(frame_of({"content": ""}, None, 0)))
    elif include_usage:
        closing.append(with_usage({**head, "object": "chat.completion.chunk", "choices": []}))
    return SseScript(frames, [*closing, DONE_FRAME])


async def completions(request: web.Request) -> web.StreamResponse:
    body = json_body(request)
    model = answered_model(request, body)
    prompts = text_inputs(body.get("prompt"))
    if prompts is None:
        raise UpstreamError(
            400, "Invalid 'prompt': expected a string, strings or token arrays.", param="prompt"
        )
    limit = _output_cap(request, body, "max_tokens")
    replies = [echo_reply(text, max_tokens=limit, stops=stop_list(body.get("stop"))) for text, _ in prompts]
    usage = openai_usage(sum(n for _, n in prompts), sum(r.tokens for r in replies))
    head = {
        "id": new_id("cmpl-"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    if body.get("stream") is not True:
        choices = [
            {"text": r.text, "index": i, "logprobs": None, "finish_reason": _FINISH[r.finish]}
            for i, r in enumerate(replies)
        ]
        return json_response({**head, "choices": choices, "usage": usage})

    def chunk(index: int, text: str, finish_reason: str | None = None) -> bytes:
        choice = {"text": text, "index": index, "logprobs": None, "finish_reason": finish_reason}
        return data_frame({**head, "choices": [choice]})

    frames = [chunk(i, piece) for i, r in enumerate(replies) for piece in r.pieces]
    closing = [chunk(i, "", _FINISH[r.finish]) for i, r in enumerate(replies)]
    if _include_usage(body):
        closing.append(data_frame({**head, "choices": [], "usage": usage}))
    return await play(request, SseScript(frames, [*closing, DONE_FRAME]))
