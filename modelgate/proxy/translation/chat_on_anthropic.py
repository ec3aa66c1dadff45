"""Route `chat_completions` on an Anthropic-kind row: chat completions served through the Messages API."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate.domain.errors import UpstreamUnavailable
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
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable("The provider answered with a body that is not JSON.") from None
        if not isinstance(message, dict):
            raise UpstreamUnavailable("The provider answered with an unexpected body.")
        try:
            return orjson.dumps(completion_of(message, model, asks_structured_output(payload)))
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:  # fields of other types
            raise UpstreamUnavailable(f"The provider answered with an unexpected body ({exc!r}).") from None

    def stream(self, model: str, payload: dict[str, Any]) -> ChatChunkStream:
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return ChatChunkStream(model, include_usage, asks_structured_output(payload))


register("chat_completions", "anthropic", ChatOnMessages())
