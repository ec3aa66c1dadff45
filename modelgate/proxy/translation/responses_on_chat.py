"""Route `responses` on rows that do not speak the Responses API: served through chat completions.

- On Anthropic-kind rows (Anthropic, Claude on Bedrock InvokeModel and Vertex rawPredict): Responses → chat
  → Messages, and back, on top of `chat_on_anthropic`.
- On OpenAI-kind rows whose host takes chat completions only (Bedrock Converse, Gemini, Vertex): Responses
  → chat; the host's dialect then translates the chat request and answers in chat format.

Rows that speak it (OpenAI, Azure, OpenAI-compatible clouds) get the request as the client wrote it
(`registry.translator_for`).
"""

from __future__ import annotations

from typing import Any

import orjson

from modelgate.domain.errors import UpstreamUnavailable
from modelgate.proxy.translation.chat_on_anthropic import ChatOnMessages
from modelgate.proxy.translation.chat_stream_to_responses import ChainedStream, ResponseEventStream
from modelgate.proxy.translation.messages_stream_to_chat import ChatChunkStream
from modelgate.proxy.translation.registry import register
from modelgate.proxy.translation.responses_to_chat import (
    asks_structured_output,
    chat_request_of,
    response_of,
)


def _response_body(completion_body: bytes, model: str, payload: dict[str, Any]) -> bytes:
    try:
        completion = orjson.loads(completion_body)
    except orjson.JSONDecodeError:
        raise UpstreamUnavailable("The provider answered with a body that is not JSON.") from None
    if not isinstance(completion, dict):
        raise UpstreamUnavailable("The provider answered with an unexpected body.")
    try:
        return orjson.dumps(response_of(completion, model, payload))
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:  # fields of other types
        raise UpstreamUnavailable(f"The provider answered with an unexpected body ({exc!r}).") from None


class ResponsesOnChatCompletions:
    """Responses request → chat completion request; chat answer or chunks → Response or its events (the
    row's dialect speaks chat to the gateway)."""

    upstream_path = "/v1/chat/completions"

    def request_body(self, payload: dict[str, Any], upstream_model: str, default_max_tokens: int) -> bytes:
        return orjson.dumps(chat_request_of(payload, upstream_model))

    def response_body(self, body: bytes, model: str, payload: dict[str, Any]) -> bytes:
        return _response_body(body, model, payload)

    def stream(self, model: str, payload: dict[str, Any]) -> ResponseEventStream:
        return ResponseEventStream(model, payload)


class ResponsesOnMessages:
    """Responses request → chat request → Messages request; and back, through the chat answer."""

    upstream_path = "/v1/messages"

    def __init__(self) -> None:
        self._chat = ChatOnMessages()

    def request_body(self, payload: dict[str, Any], upstream_model: str, default_max_tokens: int) -> bytes:
        chat = chat_request_of(payload, upstream_model)
        return self._chat.request_body(chat, upstream_model, default_max_tokens)

    def response_body(self, body: bytes, model: str, payload: dict[str, Any]) -> bytes:
        completion = self._chat.response_body(body, model, _structured(payload))
        return _response_body(completion, model, payload)

    def stream(self, model: str, payload: dict[str, Any]) -> ChainedStream:
        chat = ChatChunkStream(model, True, asks_structured_output(payload))
        return ChainedStream(chat, ResponseEventStream(model, payload))


def _structured(payload: dict[str, Any]) -> dict[str, Any]:
    """What the chat translator reads of the request to read the answer: whether it asked for JSON."""
    return {"response_format": {"type": "json_object"}} if asks_structured_output(payload) else {}


register("responses", "anthropic", ResponsesOnMessages())
register("responses", "openai", ResponsesOnChatCompletions())
