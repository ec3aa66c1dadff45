"""A chat completion stream as a Messages event stream, translated event by event as chunks arrive.

Chat deltas have no blocks; here each run of text, of reasoning (`reasoning_content`: a thinking block) and
each tool call (by its `index`) opens one content block, closed when the next one opens. Usage arrives last
(`stream_options.include_usage`), so it is reported in `message_delta`, which therefore waits for `[DONE]`
(or the end of the stream).
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from modelgate.domain.errors import UpstreamUnavailable
from modelgate.proxy.pipeline.envelopes import envelope_b_body
from modelgate.proxy.translation.messages_to_chat import (
    matched_stop_of,
    new_message_id,
    stop_reason_of,
    usage_of,
)
from modelgate.proxy.translation.sse import EventStreamTranslator, SseEvent, named_frame

_PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
# Text deltas are the hot path: their frame is pre-encoded around the JSON string of the text.
_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_TEXT_DELTA_MID = b',"delta":{"type":"text_delta","text":'
_JSON_DELTA_MID = b',"delta":{"type":"input_json_delta","partial_json":'
_THINKING_DELTA_MID = b',"delta":{"type":"thinking_delta","thinking":'
_DELTA_TAIL = b"}}\n\n"
_CLOSED = -1


# An Anthropic `error` event; the SDKs raise it as an API error instead of seeing a broken stream.
_ERROR_EVENT = named_frame(b"error", envelope_b_body(UpstreamUnavailable()))


class MessagesEventStream(EventStreamTranslator):
    """Chat completion chunks in, `message_start` … `message_stop` out; one instance per streamed answer."""

    __slots__ = (
        "_blocks",
        "_called_tools",
        "_finish_reason",
        "_matched_stop",
        "_model",
        "_open",
        "_started",
        "_text_head",
        "_thinking_head",
        "_tools",
        "_usage",
    )

    def __init__(self, model: str) -> None:
        self._model = model
        super().__init__()
        self._started = False
        self._blocks = 0  # content blocks opened so far; the next one gets this index
        self._open = _CLOSED  # index of the open block
        self._text_head = b""  # delta frame head of the open block when it is text, else empty
        self._thinking_head = b""  # the same when it is thinking
        self._tools: dict[int, int] = {}  # chat tool_call index → content block index
        self._called_tools = False
        self._finish_reason: str | None = None
        self._matched_stop: str | None = None
        self._usage: dict[str, Any] | None = None

    def _answer_finished(self) -> bool:
        return self._finish_reason is not None

    # -- events ------------------------------------------------------------------------------------

    def _on_event(self, event: SseEvent, out: list[bytes]) -> None:
        if self._ended:
            return
        chunk = self._chat_chunk(event, out)
        if chunk is None:
            return
        usage = chunk.get("usage")
        if usage:
            self._usage = usage
        if not self._started:
            self._start(out)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:
                self._on_choice(choice, out)

    def _on_choice(self, choice: dict[str, Any], out: list[bytes]) -> None:
        delta = choice.get("delta")
        if delta:
            reasoning = delta.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                if not self._thinking_head:
                    self._open_thinking(out)
                out.append(self._thinking_head)
                out.append(orjson.dumps(reasoning))
                out.append(_DELTA_TAIL)
            text = delta.get("content") or delta.get("refusal")
            if text:
                if not self._text_head:
                    self._open_text(out)
                out.append(self._text_head)
                out.append(orjson.dumps(text))
                out.append(_DELTA_TAIL)
            calls = delta.get("tool_calls")
            if calls:
                for call in calls:
                    self._on_tool_call(call, out)
        finish_reason = choice.get("finish_reason")
        if finish_reason is not None:
            self._finish_reason = finish_reason
            self._matched_stop = matched_stop_of(choice)
            self._stop_block(out)

    def _on_tool_call(self, call: dict[str, Any], out: list[bytes]) -> None:
        position = call.get("index", 0)
        function = call.get("function") or {}
        block = self._tools.get(position)
        if block is None:
            block = self._open_block(
                out,
                {
                    "type": "tool_use",
                    "id": call.get("id") or "toolu_" + os.urandom(12).hex(),
                    "name": function.get("name") or "",
                    "input": {},
                },
            )
            self._tools[position] = block
            self._called_tools = True
        arguments = function.get("arguments")
        if arguments:
            # Servers send one call's fragments together; should one interleave, the delta still names
            # its own block, which is how the SDKs accumulate input.
            out.append(_DELTA_HEAD + str(block).encode())
            out.append(_JSON_DELTA_MID)
            out.append(orjson.dumps(arguments))
            out.append(_DELTA_TAIL)

    # -- message and blocks ------------------------------------------------------------------------

    def _start(self, out: list[bytes]) -> None:
        self._started = True
        usage = usage_of(self._usage) if self._usage else {"input_tokens": 0, "output_tokens": 0}
        message = {
            "id": new_message_id(),
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        out.append(named_frame(b"message_start", {"type": "message_start", "message": message}))
        out.append(_PING)

    def _open_text(self, out: list[bytes]) -> None:
        index = self._open_block(out, {"type": "text", "text": ""})
        self._text_head = _DELTA_HEAD + str(index).encode() + _TEXT_DELTA_MID

    def _open_thinking(self, out: list[bytes]) -> None:
        # Chat reasoning carries no signature: the block's stays empty (a native row would not take it back).
        index = self._open_block(out, {"type": "thinking", "thinking": "", "signature": ""})
        self._thinking_head = _DELTA_HEAD + str(index).encode() + _THINKING_DELTA_MID

    def _open_block(self, out: list[bytes], block: dict[str, Any]) -> int:
        self._stop_block(out)
        index = self._open = self._blocks
        self._blocks += 1
        frame = {"type": "content_block_start", "index": index, "content_block": block}
        out.append(named_frame(b"content_block_start", frame))
        return index

    def _stop_block(self, out: list[bytes]) -> None:
        if self._open != _CLOSED:
            frame = {"type": "content_block_stop", "index": self._open}
            out.append(named_frame(b"content_block_stop", frame))
            self._open = _CLOSED
            self._text_head = self._thinking_head = b""

    def _close(self, out: list[bytes]) -> None:
        if not self._started:
            self._start(out)
        self._stop_block(out)
        stop_reason, stop_sequence = stop_reason_of(
            self._finish_reason, self._matched_stop, self._called_tools
        )
        usage = usage_of(self._usage) if self._usage else {"output_tokens": 0}
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        out.append(named_frame(b"message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(_MESSAGE_STOP)
        self._ended = True

    def _error_event(self) -> bytes:
        return _ERROR_EVENT
