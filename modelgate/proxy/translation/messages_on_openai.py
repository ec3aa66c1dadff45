"""Route `messages` on an OpenAI-kind row: the Messages API served through chat completions."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate.domain.errors import UpstreamUnavailable
from modelgate.proxy.translation.chat_stream_to_messages import MessagesEventStream
from modelgate.proxy.translation.messages_to_chat import chat_request_of, message_of
from modelgate.proxy.translation.registry import register


class MessagesOnChatCompletions:
    """Messages request → chat completion request; chat answer or chunks → Message or events."""

    upstream_path = "/v1/chat/completions"

    def request_body(self, payload: dict[str, Any], upstream_model: str, default_max_tokens: int) -> bytes:
        return orjson.dumps(chat_request_of(payload, upstream_model))

    def response_body(self, body: bytes, model: str, payload: dict[str, Any]) -> bytes:
        try:
            completion = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise UpstreamUnavailable("The provider answered with a body that is not JSON.") from None
        if not isinstance(completion, dict):
            raise UpstreamUnavailable("The provider answered with an unexpected body.")
        try:
            return orjson.dumps(message_of(completion, model))
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:  # fields of other types
            raise UpstreamUnavailable(f"The provider answered with an unexpected body ({exc!r}).") from None

    def stream(self, model: str, payload: dict[str, Any]) -> MessagesEventStream:
        return MessagesEventStream(model)


register("messages", "openai", MessagesOnChatCompletions())
