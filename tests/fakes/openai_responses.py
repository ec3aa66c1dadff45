"""OpenAI Responses API: create (plain and streamed), retrieve and delete, stored in memory."""

from __future__ import annotations

import itertools
import time
from typing import Any

from aiohttp import web

from .context import CONTEXT, answered_model, created_id, fault_of, json_body, optional_int
from .echo_model import Reply, echo_reply, last_user_text, new_id, prompt_tokens
from .envelopes import UpstreamError, json_response
from .sse import SseScript, event_frame, play


def _input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """`input` as message items: a bare string is one user message."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    raise UpstreamError(400, "Invalid 'input': expected a string or a list of items.", param="input")


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _response_object(body: dict[str, Any], model: str, reply: Reply, input_tokens: int) -> dict[str, Any]:
    incomplete = reply.finish == "length"
    status = "incomplete" if incomplete else "completed"
    created = int(time.time())
    message = {
        "id": new_id("msg_"),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}],
    }
    # No `output_text` key: like the real API, that is an SDK-side convenience property.
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": created,
        "completed_at": None if incomplete else created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "model": model,
        "output": [message],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store") is not False,
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": _usage(input_tokens, reply.tokens),
        "user": None,
    }


async def create_response(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    body = json_body(request)
    model = answered_model(request, body)
    items = _input_items(body)
    previous = body.get("previous_response_id")
    if previous is not None and previous not in ctx.responses:
        # Lets a test prove a follow-up reached the upstream that stored the first response.
        message = f"Previous response with id '{previous}' not found."
        raise UpstreamError(400, message, param="previous_response_id")
    reply = echo_reply(last_user_text(items), max_tokens=optional_int(body, "max_output_tokens"))
    response = _response_object(body, model, reply, prompt_tokens(items, system=body.get("instructions")))
    fault = fault_of(request)
    response["id"] = created_id(request, response["id"])
    if fault is not None and fault.report_usage:
        # The usage, tool-call items (`output_items`, after the message) and service tier a test asks for.
        response["usage"] = fault.report_usage["usage"]
        response["output"] += fault.report_usage.get("output_items", [])
        response["service_tier"] = fault.report_usage.get("service_tier", "default")
    if body.get("background") is True and body.get("stream") is not True:
        # Answered before the model runs, as the real API does: queued, usage null. What it becomes (its
        # usage, what the provider bills) is set when the test finishes it.
        ctx.background[response["id"]] = {**response, "background": True}
        queued = {**response, "status": "queued", "background": True, "output": [], "usage": None}
        queued["completed_at"] = None
        ctx.responses[response["id"]] = queued
        return json_response(queued)
    if response["store"]:
        ctx.responses[response["id"]] = response
    if body.get("stream") is True:
        return await play(request, _response_script(response, reply))
    return json_response(response)


def _response_script(response: dict[str, Any], reply: Reply) -> SseScript:
    sequence = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        return event_frame(kind, {"type": kind, "sequence_number": next(sequence), **fields})

    pending = {
        **response,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "incomplete_details": None,
        "completed_at": None,
    }
    item = response["output"][0]
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    body = [
        event("response.created", response=pending),
        event("response.in_progress", response=pending),
        event(
            "response.output_item.added",
            output_index=0,
            item={**item, "status": "in_progress", "content": []},
        ),
        event("response.content_part.added", **where, part={**part, "text": ""}),
        *(event("response.output_text.delta", **where, delta=piece, logprobs=[]) for piece in reply.pieces),
    ]
    closing = [
        event("response.output_text.done", **where, text=part["text"], logprobs=[]),
        event("response.content_part.done", **where, part=part),
        event("response.output_item.done", output_index=0, item=item),
        event(f"response.{response['status']}", response=response),
    ]
    return SseScript(body, closing)


def _stored(request: web.Request) -> tuple[str, dict[str, dict[str, Any]]]:
    response_id = request.match_info["response_id"]
    store = request.app[CONTEXT].responses
    if response_id not in store:
        raise UpstreamError(404, f"Response with id '{response_id}' not found.", param="response_id")
    return response_id, store


async def retrieve_response(request: web.Request) -> web.Response:
    response_id, store = _stored(request)
    return json_response(store[response_id])


async def delete_response(request: web.Request) -> web.Response:
    response_id, store = _stored(request)
    del store[response_id]
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})
