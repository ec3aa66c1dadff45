"""A chat completion stream as a Responses event stream, translated chunk by chunk as it arrives.

`response.created` and `response.in_progress` open it; a run of reasoning (`reasoning_content`) is a
reasoning item with a summary part, a run of text a message item with an `output_text` part, each tool call
(by its `index`) a `function_call` item; an item is done when the next text or reasoning item opens (a
function call when the answer ends). `response.completed` (or `response.incomplete`) closes it with the
whole output and the usage of the chat stream's last chunk, as the openai SDK's `responses.stream` expects.
The items' text is kept until then: the closing events repeat it, as the API's own do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from modelgate.domain.errors import UpstreamUnavailable
from modelgate.proxy.pipeline.envelopes import envelope_a_body
from modelgate.proxy.translation.responses_to_chat import (
    function_call_item,
    message_item,
    new_item_id,
    new_response_id,
    output_logprobs_of,
    reasoning_item,
    response_object,
    usage_of,
)
from modelgate.proxy.translation.sse import EventStreamTranslator, SseEvent, data_frame

# The openai SDK raises an APIError for an event carrying `error`, instead of a broken stream.
_ERROR_EVENT = data_frame(envelope_a_body(UpstreamUnavailable()))


@dataclass(slots=True)
class _Item:
    """One output item being streamed: its kind ("message", "reasoning", "function_call"), where it is in
    the output, and its text (or arguments) so far."""

    kind: str
    id: str
    index: int
    pieces: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # a message's, as they came
    call_id: str = ""
    name: str = ""
    done: dict[str, Any] | None = None  # the finished item, once it is done


class ResponseEventStream(EventStreamTranslator):
    """Chat completion chunks in, Responses events out; one instance per streamed answer."""

    __slots__ = (
        "_calls",
        "_finish_reason",
        "_id",
        "_items",
        "_model",
        "_open",
        "_payload",
        "_sequence",
        "_usage",
    )

    def __init__(self, model: str, payload: dict[str, Any]) -> None:
        super().__init__()
        self._model = model
        self._payload = payload
        self._id = new_response_id()
        self._sequence = 0
        self._items: list[_Item] = []
        self._open: _Item | None = None  # the open message or reasoning item
        self._calls: dict[int, _Item] = {}  # chat tool_call index → its function_call item
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None

    def _answer_finished(self) -> bool:
        return self._finish_reason is not None

    def _event(self, out: list[bytes], kind: str, body: dict[str, Any]) -> None:
        body = {"type": kind, "sequence_number": self._sequence, **body}
        self._sequence += 1
        out.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n")

    def _response(self, finish_reason: str | None) -> dict[str, Any]:
        output = [item.done for item in self._items if item.done is not None]
        usage = usage_of(self._usage) if finish_reason is not None else None
        return response_object(self._id, self._model, self._payload, output, finish_reason, usage)

    # -- chunks ------------------------------------------------------------------------------------

    def _on_event(self, event: SseEvent, out: list[bytes]) -> None:
        chunk = self._chat_chunk(event, out)
        if chunk is None:
            return
        if not self._sequence:
            created = self._response(None)
            self._event(out, "response.created", {"response": created})
            self._event(out, "response.in_progress", {"response": created})
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._on_choice(choice, out)

    def _on_choice(self, choice: dict[str, Any], out: list[bytes]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                item = (
                    self._open if self._open and self._open.kind == "reasoning" else self._open_reasoning(out)
                )
                item.pieces.append(reasoning)
                where = {"item_id": item.id, "output_index": item.index, "summary_index": 0}
                self._event(out, "response.reasoning_summary_text.delta", {**where, "delta": reasoning})
            text = delta.get("content") or delta.get("refusal")
            if isinstance(text, str) and text:
                item = self._open if self._open and self._open.kind == "message" else self._open_message(out)
                item.pieces.append(text)
                logprobs = output_logprobs_of(choice.get("logprobs"))
                item.logprobs.extend(logprobs)
                where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
                self._event(out, "response.output_text.delta", {**where, "delta": text, "logprobs": logprobs})
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    self._on_tool_call(call, out)
        if choice.get("finish_reason") is not None:
            self._finish_reason = choice["finish_reason"]

    def _on_tool_call(self, call: dict[str, Any], out: list[bytes]) -> None:
        position = call.get("index", 0)
        function = call.get("function") or {}
        item = self._calls.get(position)
        if item is None:
            self._finish_open(out)
            item = self._new_item("function_call", "fc")
            item.call_id = call.get("id") or new_item_id("call")
            item.name = function.get("name") or ""
            added = function_call_item(item.id, item.call_id, item.name, "")
            self._event(
                out,
                "response.output_item.added",
                {"output_index": item.index, "item": added | {"status": "in_progress"}},
            )
            self._calls[position] = item
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.pieces.append(arguments)
            where = {"item_id": item.id, "output_index": item.index}
            self._event(out, "response.function_call_arguments.delta", {**where, "delta": arguments})

    # -- items -------------------------------------------------------------------------------------

    def _new_item(self, kind: str, prefix: str) -> _Item:
        item = _Item(kind, new_item_id(prefix), len(self._items))
        self._items.append(item)
        return item

    def _open_message(self, out: list[bytes]) -> _Item:
        self._finish_open(out)
        item = self._open = self._new_item("message", "msg")
        added = message_item(item.id, "", "in_progress") | {"content": []}
        self._event(out, "response.output_item.added", {"output_index": item.index, "item": added})
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        self._event(out, "response.content_part.added", {**where, "part": part})
        return item

    def _open_reasoning(self, out: list[bytes]) -> _Item:
        self._finish_open(out)
        item = self._open = self._new_item("reasoning", "rs")
        added = {"id": item.id, "type": "reasoning", "summary": []}
        self._event(out, "response.output_item.added", {"output_index": item.index, "item": added})
        where = {"item_id": item.id, "output_index": item.index, "summary_index": 0}
        self._event(
            out,
            "response.reasoning_summary_part.added",
            {**where, "part": {"type": "summary_text", "text": ""}},
        )
        return item

    def _finish_open(self, out: list[bytes]) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        text = "".join(item.pieces)
        if item.kind == "message":
            where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
            logprobs = item.logprobs
            self._event(out, "response.output_text.done", {**where, "text": text, "logprobs": logprobs})
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
            self._event(out, "response.content_part.done", {**where, "part": part})
            item.done = message_item(item.id, text, "completed", logprobs)
        else:
            where = {"item_id": item.id, "output_index": item.index, "summary_index": 0}
            self._event(out, "response.reasoning_summary_text.done", {**where, "text": text})
            self._event(
                out,
                "response.reasoning_summary_part.done",
                {**where, "part": {"type": "summary_text", "text": text}},
            )
            item.done = reasoning_item(item.id, text)
        self._event(out, "response.output_item.done", {"output_index": item.index, "item": item.done})

    def _finish_calls(self, out: list[bytes]) -> None:
        for item in self._calls.values():
            arguments = "".join(item.pieces) or "{}"
            where = {"item_id": item.id, "output_index": item.index}
            self._event(
                out,
                "response.function_call_arguments.done",
                {**where, "name": item.name, "arguments": arguments},
            )
            item.done = function_call_item(item.id, item.call_id, item.name, arguments)
            self._event(out, "response.output_item.done", {"output_index": item.index, "item": item.done})
        self._calls.clear()

    def _close(self, out: list[bytes]) -> None:
        if self._finish_reason is None:
            self._fail("The provider ended the stream before the answer was complete.", out)
            return
        if not self._sequence:
            created = self._response(None)
            self._event(out, "response.created", {"response": created})
        self._finish_open(out)
        self._finish_calls(out)
        response = self._response(self._finish_reason)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        self._event(out, kind, {"response": response})
        self._ended = True

    def _error_event(self) -> bytes:
        return _ERROR_EVENT


class ChainedStream:
    """Two stream translators one after the other (Messages events → chat chunks → Responses events)."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: EventStreamTranslator, second: EventStreamTranslator) -> None:
        self._first = first
        self._second = second

    @property
    def failure(self) -> str | None:
        """Why the stream failed, as the first translator that saw it said (for the operator's log)."""
        return self._first.failure or self._second.failure

    def feed(self, chunk: bytes) -> bytes:
        middle = self._first.feed(chunk)
        return self._second.feed(middle) if middle else b""

    def finish(self) -> bytes:
        middle = self._first.finish()
        out = self._second.feed(middle) if middle else b""
        return out + self._second.finish()
