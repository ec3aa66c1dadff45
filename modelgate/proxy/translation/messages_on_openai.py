"""Route `messages` on an OpenAI-kind row: the Messages API served through chat completions."""

from __future__ import annotations

from typing import Any

import orjson

from modelgate.proxy.translation.base import translated_answer
from modelgate.proxy.translation.chat_stream_to_messages import MessagesEventStream
from modelgate.proxy.translation.messages_to_chat import chat_request_of, message_of
from modelgate.proxy.translation.registry import register


class MessagesOnChatCompletions:
    """Messages request → chat completion request; chat answer or chunks → Message or events."""

    upstream_path = "/v1/chat/completions"

    def request_body(self, payload: dict[str, Any], upstream_model: str, default_max_tokens: int) -> bytes:
        return orjson.dumps(chat_request_of(payload, upstream_model))

    def response_body(self, body: bytes, model: str, payload: dict[str, Any]) -> bytes:
        return translated_answer(body, lambda completion: message_of(completion, model))

    def stream(self, model: str, payload: dict[str, Any]) -> MessagesEventStream:
        return MessagesEventStream(model)


register("messages", "openai", MessagesOnChatCompletions())
