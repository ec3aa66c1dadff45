"""Server-sent events on the wire: an incremental parser for upstream streams and frame encoders.

The parser keeps only the unfinished tail of the stream between calls, so an event split across TCP
chunks (even inside a line, or between `\\r` and `\\n`) comes out whole once its blank line arrives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

_CR = 13
_SPACE = 32


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its `event:` name (None when absent) and its `data:` lines joined by LF."""

    name: str | None
    data: bytes


class SseParser:
    """Feeds bytes in, yields complete events out; `id:` and `retry:` fields are not needed and dropped."""

    __slots__ = ("_carry", "_data", "_name")

    def __init__(self) -> None:
        self._carry = b""  # the unfinished last line, usually empty: providers send whole events per chunk
        self._name: str | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events completed by `chunk`, oldest first."""
        data = self._carry + chunk if self._carry else chunk
        events: list[SseEvent] = []
        find = data.find
        start = 0
        while True:
            end = find(b"\n", start)
            if end < 0:
                break
            stop = end - 1 if end > start and data[end - 1] == _CR else end
            if stop == start:
                self._dispatch(events)
            else:
                self._field(data, start, stop)
            start = end + 1
        self._carry = data[start:] if start < len(data) else b""
        return events

    def finish(self) -> list[SseEvent]:
        """An event left unterminated when the stream ended (a last line without its blank line)."""
        carry, self._carry = self._carry, b""
        if carry:
            stop = len(carry) - 1 if carry[-1] == _CR else len(carry)
            if stop:
                self._field(carry, 0, stop)
        events: list[SseEvent] = []
        self._dispatch(events)
        return events

    def _field(self, data: bytes, start: int, stop: int) -> None:
        # Slices straight out of the chunk: one copy per value, none per line.
        if data.startswith(b"data:", start, stop):
            value = start + 5
            if value < stop and data[value] == _SPACE:
                value += 1
            self._data.append(data[value:stop])
        elif data.startswith(b"event:", start, stop):
            value = start + 6
            if value < stop and data[value] == _SPACE:
                value += 1
            self._name = data[value:stop].decode("utf-8", "replace")
        # Anything else is a comment (a leading colon: keep-alives) or a field this proxy has no use for.

    def _dispatch(self, events: list[SseEvent]) -> None:
        data = self._data
        if data:
            events.append(SseEvent(self._name, data[0] if len(data) == 1 else b"\n".join(data)))
            data.clear()
        self._name = None


def named_frame(name: bytes, payload: object) -> bytes:
    """`event: <name>` + `data: <json>`, the Anthropic stream framing."""
    return b"event: " + name + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def data_frame(payload: object) -> bytes:
    """`data: <json>` only, the OpenAI chat stream framing."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE_FRAME = b"data: [DONE]\n\n"


class EventStreamTranslator:
    """The driver both stream translators share: parse SSE events as they arrive, translate each into
    `out`, and at the end close the answer or, if it stopped short, send an error.

    The client's error event says only that the model is unavailable; why the stream failed (the provider's
    own error message, say) is kept in `failure` for the operator's log.
    """

    __slots__ = ("_ended", "_parser", "failure")

    def __init__(self) -> None:
        self._parser = SseParser()
        self._ended = False
        self.failure: str | None = None

    def feed(self, chunk: bytes) -> bytes:
        """Client bytes for the events this chunk completed."""
        if self._ended:
            return b""
        out: list[bytes] = []
        for event in self._parser.feed(chunk):
            self._on_event(event, out)
            if self._ended:
                break
        return b"".join(out)

    def finish(self) -> bytes:
        """Close the answer after the upstream ended; an error event if it ended before the answer was."""
        if self._ended:
            return b""
        out: list[bytes] = []
        for event in self._parser.finish():
            self._on_event(event, out)
        if not self._ended:
            if self._answer_finished():
                self._close(out)
            else:
                self._fail("The provider ended the stream before the answer was complete.", out)
        return b"".join(out)

    def _on_event(self, event: SseEvent, out: list[bytes]) -> None:
        raise NotImplementedError

    def _json_event(self, event: SseEvent, out: list[bytes]) -> dict[str, Any] | None:
        """The event's JSON object; None for JSON of another type, or (the stream then failed) for an event
        that is not JSON."""
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            self._fail("The provider sent an unreadable stream event.", out)
            return None
        return data if isinstance(data, dict) else None

    def _chat_chunk(self, event: SseEvent, out: list[bytes]) -> dict[str, Any] | None:
        """The chat completion chunk an OpenAI-style stream event carries; None once `[DONE]` closed the
        answer, or when the stream failed (an unreadable event, a chunk carrying `error`)."""
        if event.data == b"[DONE]":
            self._close(out)
            return None
        chunk = self._json_event(event, out)
        error = chunk.get("error") if chunk is not None else None
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else None
            self._fail(message if isinstance(message, str) else "The provider reported a stream error.", out)
            return None
        return chunk

    def _answer_finished(self) -> bool:
        raise NotImplementedError

    def _close(self, out: list[bytes]) -> None:
        raise NotImplementedError

    def _fail(self, message: str, out: list[bytes]) -> None:
        self.failure = message
        out.append(self._error_event())
        self._ended = True

    def _error_event(self) -> bytes:
        raise NotImplementedError
