"""Route `chat_completions` on an Anthropic-kind row: chat completions served through the Messages API."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate.proxy.translation.base import translated_answer
from modelgate.proxy.translation.chat_to_messages import completion_of, messages_request_of
from modelgate.proxy.translation.messages_stream_to_chat import ChatChunkStream
from modelgate.proxy.translation.registry import register
from modelgate.proxy.translation.structured_output import asks_structured_output


class ChatOnMessages:
    """Chat completion request → Messages request; Message or events → chat answer or chunks."""

    upstream_path = "/v1/messages"

    def request_body(self, payload: dict[str, Any], upstream_model: str, default_max_tokens: int) -> bytes:
        return orjson.dumps(messages_request_of(payload, upstream_model, default_max_tokens))

    def response_body(self, body: bytes, model: str, payload: dict[str, Any]) -> bytes:
        structured = asks_structured_output(payload)
        return translated_answer(body, lambda message: completion_of(message, model, structured))

    def stream(self, model: str, payload: dict[str, Any]) -> ChatChunkStream:
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return ChatChunkStream(model, include_usage, asks_structured_output(payload))


register("chat_completions", "anthropic", ChatOnMessages())
