"""A Messages event stream as a chat completion stream, translated event by event as chunks arrive.

Text deltas become `content` deltas, each tool_use block a tool call with its own `index`, its
`input_json_delta` fragments that call's `arguments`; thinking deltas `reasoning_content` deltas (their
signatures have no place in chat). When the request asked for structured output, the answer tool's
fragments are `content` deltas (structured_output.py) and its call finishes with `stop`.
The usage chunk (`choices: []`) is sent only when the client asked for it, as OpenAI does.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from modelgate.domain.errors import UpstreamUnavailable
from modelgate.proxy.pipeline.envelopes import envelope_a_body
from modelgate.proxy.translation.chat_to_messages import FINISH_REASONS, chat_usage_of, new_completion_id
from modelgate.proxy.translation.sse import DONE_FRAME, EventStreamTranslator, SseEvent, data_frame
from modelgate.proxy.translation.structured_output import ANSWER_TOOL

_CHOICE_TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'
_ROLE_DELTA = b'{"role":"assistant","content":""}'
_CONTENT_OPEN = b'{"content":'
_CALL_OPEN = b'{"tool_calls":[{"index":'
_ARGUMENTS_OPEN = b',"function":{"arguments":'
_CALL_CLOSE = b"}}]}"


# The openai SDK raises an APIError for a chunk carrying `error`, instead of a broken stream.
_ERROR_CHUNK = data_frame(envelope_a_body(UpstreamUnavailable()))


class ChatChunkStream(EventStreamTranslator):
    """Messages events in, `chat.completion.chunk` frames and `[DONE]` out; one instance per answer."""

    __slots__ = (
        "_answer_block",
        "_answered",
        "_created",
        "_head",
        "_id",
        "_include_usage",
        "_model",
        "_stop_reason",
        "_structured",
        "_tools",
        "_usage",
    )

    def __init__(self, model: str, include_usage: bool, structured: bool = False) -> None:
        self._model = model
        self._include_usage = include_usage
        self._structured = structured
        self._answer_block = -1  # the content block index of the answer tool's call, once it opened
        self._answered = False
        super().__init__()
        self._id = new_completion_id()
        self._created = int(time.time())
        # Every chunk starts the same way; encoded once per stream, not once per delta.
        self._head = b"".join(
            (
                b'data: {"id":"',
                self._id.encode(),
                b'","object":"chat.completion.chunk","created":',
                str(self._created).encode(),
                b',"model":',
                orjson.dumps(model),
                b',"choices":[{"index":0,"delta":',
            )
        )
        self._tools: dict[int, int] = {}  # content block index → chat tool call index
        self._stop_reason: str | None = None
        self._usage: dict[str, Any] = {}

    def _answer_finished(self) -> bool:
        return self._stop_reason is not None

    def _on_event(self, event: SseEvent, out: list[bytes]) -> None:
        if event.name == "ping" or self._ended:
            return
        data = self._json_event(event, out)
        if data is None:
            return
        kind = data.get("type") or event.name
        if kind == "content_block_delta":
            self._on_delta(data, out)
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") != "tool_use":
                pass
            elif self._structured and block.get("name") == ANSWER_TOOL:
                self._answer_block, self._answered = data.get("index", 0), True
            else:
                self._open_call(data.get("index", 0), block, out)
        elif kind == "message_start":
            message = data.get("message") or {}
            self._usage.update(message.get("usage") or {})
            self._chunk(_ROLE_DELTA, out)
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            self._stop_reason = delta.get("stop_reason") or self._stop_reason
            # message_delta usage is cumulative; fields it leaves out keep their message_start value.
            self._usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self._close(out)
        elif kind == "error":
            error = data.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self._fail(message if isinstance(message, str) else "The provider reported a stream error.", out)

    def _on_delta(self, data: dict[str, Any], out: list[bytes]) -> None:
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if text:
                out.append(self._head)
                out.append(_CONTENT_OPEN)
                out.append(orjson.dumps(text))
                out.append(b"}")
                out.append(_CHOICE_TAIL)
        elif kind == "thinking_delta":
            thinking = delta.get("thinking")
            if thinking:  # chat's de facto place for reasoning text (the signature has none)
                self._chunk(b'{"reasoning_content":' + orjson.dumps(thinking) + b"}", out)
        elif kind == "input_json_delta":
            index = data.get("index", 0)
            call = self._tools.get(index)
            fragment = delta.get("partial_json")
            if fragment and index == self._answer_block:
                self._chunk(_CONTENT_OPEN + orjson.dumps(fragment) + b"}", out)
            elif call is not None and fragment:
                out.append(self._head)
                out.append(_CALL_OPEN + str(call).encode() + _ARGUMENTS_OPEN)
                out.append(orjson.dumps(fragment))
                out.append(_CALL_CLOSE)
                out.append(_CHOICE_TAIL)

    def _open_call(self, block_index: int, block: dict[str, Any], out: list[bytes]) -> None:
        call = self._tools[block_index] = len(self._tools)
        opening = {
            "tool_calls": [
                {
                    "index": call,
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": ""},
                }
            ]
        }
        self._chunk(orjson.dumps(opening), out)

    def _chunk(self, delta: bytes, out: list[bytes]) -> None:
        out.append(self._head)
        out.append(delta)
        out.append(_CHOICE_TAIL)

    def _close(self, out: list[bytes]) -> None:
        finish_reason = FINISH_REASONS.get(self._stop_reason, "stop")
        if self._answered and not self._tools and finish_reason == "tool_calls":
            finish_reason = "stop"
        out.append(self._head)
        out.append(b'{},"logprobs":null,"finish_reason":"' + finish_reason.encode() + b'"}]}\n\n')
        if self._include_usage:
            out.append(
                data_frame(
                    {
                        "id": self._id,
                        "object": "chat.completion.chunk",
                        "created": self._created,
                        "model": self._model,
                        "choices": [],
                        "usage": chat_usage_of(self._usage),
                    }
                )
            )
        out.append(DONE_FRAME)
        self._ended = True

    def _error_event(self) -> bytes:
        return _ERROR_CHUNK
