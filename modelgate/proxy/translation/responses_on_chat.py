"""Route `responses` on rows that do not speak the Responses API: served through chat completions.

- On Anthropic-kind rows (Anthropic, Claude on Bedrock InvokeModel and Vertex rawPredict): Responses → chat
  → Messages, and back, through the chat ⇄ Messages translation (`chat_to_messages`,
  `messages_stream_to_chat`).
- On OpenAI-kind rows whose host takes chat completions only (Bedrock Converse, Gemini, Vertex): Responses
  → chat; the host's dialect then translates the chat request and answers in chat format.

Rows that speak it (OpenAI, Azure, OpenAI-compatible clouds) get the request as the client wrote it
(`registry.translator_for`).
"""

from __future__ import annotations

from typing import Any

import orjson

from modelgate.proxy.translation.base import translated_answer
from modelgate.proxy.translation.chat_stream_to_responses import ChainedStream, ResponseEventStream
from modelgate.proxy.translation.chat_to_messages import completion_of, messages_request_of
from modelgate.proxy.translation.messages_stream_to_chat import ChatChunkStream
from modelgate.proxy.translation.registry import register
from modelgate.proxy.translation.responses_to_chat import (
    asks_structured_output,
    chat_request_of,
    response_of,
)


class ResponsesOnChatCompletions:
    """Responses request → chat completion request; chat answer or chunks → Response or its events (the
    row's dialect speaks chat to the gateway)."""

    upstream_path = "/v1/chat/completions"

    def request_body(self, payload: dict[str, Any], upstream_model: str, default_max_tokens: int) -> bytes:
        return orjson.dumps(chat_request_of(payload, upstream_model))

    def response_body(self, body: bytes, model: str, payload: dict[str, Any]) -> bytes:
        return translated_answer(body, lambda completion: response_of(completion, model, payload))

    def stream(self, model: str, payload: dict[str, Any]) -> ResponseEventStream:
        return ResponseEventStream(model, payload)


class ResponsesOnMessages:
    """Responses request → chat request → Messages request; and back, through the chat answer."""

    upstream_path = "/v1/messages"

    def request_body(self, payload: dict[str, Any], upstream_model: str, default_max_tokens: int) -> bytes:
        chat = chat_request_of(payload, upstream_model)
        return orjson.dumps(messages_request_of(chat, upstream_model, default_max_tokens))

    def response_body(self, body: bytes, model: str, payload: dict[str, Any]) -> bytes:
        structured = asks_structured_output(payload)
        return translated_answer(
            body, lambda message: response_of(completion_of(message, model, structured), model, payload)
        )

    def stream(self, model: str, payload: dict[str, Any]) -> ChainedStream:
        chat = ChatChunkStream(model, True, asks_structured_output(payload))
        return ChainedStream(chat, ResponseEventStream(model, payload))


register("responses", "anthropic", ResponsesOnMessages())
register("responses", "openai", ResponsesOnChatCompletions())
