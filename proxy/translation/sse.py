"""Server-sent events on the wire: an incremental parser for upstream streams and frame encoders.

The parser keeps only the unfinished tail of the stream between calls, so an event split across TCP
chunks (even inside a line, or between `\\r` and `\\n`) comes out whole once its blank line arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

_LF = 10
_CR = 13
_COLON = 58
_SPACE = 32


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its `event:` name (None when absent) and its `data:` lines joined by LF."""

    name: str | None
    data: bytes


class SseParser:
    """Feeds bytes in, yields complete events out; `id:` and `retry:` fields are not needed and dropped."""

    __slots__ = ("_buffer", "_data", "_name")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._name: str | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events completed by `chunk`, oldest first."""
        buffer = self._buffer
        buffer += chunk
        events: list[SseEvent] = []
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            stop = end - 1 if end > start and buffer[end - 1] == _CR else end
            if stop == start:
                self._dispatch(events)
            elif buffer[start] != _COLON:  # a leading colon marks a comment (keep-alive)
                self._field(bytes(buffer[start:stop]))
            start = end + 1
        if start:
            del buffer[:start]
        return events

    def finish(self) -> list[SseEvent]:
        """An event left unterminated when the stream ended (a last line without its blank line)."""
        if self._buffer:
            line = bytes(self._buffer).rstrip(b"\r")
            self._buffer.clear()
            if line and line[0] != _COLON:
                self._field(line)
        events: list[SseEvent] = []
        self._dispatch(events)
        return events

    def _field(self, line: bytes) -> None:
        name, _, value = line.partition(b":")
        if value and value[0] == _SPACE:
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._name = value.decode("utf-8", "replace")

    def _dispatch(self, events: list[SseEvent]) -> None:
        data = self._data
        if data:
            events.append(SseEvent(self._name, data[0] if len(data) == 1 else b"\n".join(data)))
            self._data = []
        self._name = None


def named_frame(name: bytes, payload: object) -> bytes:
    """`event: <name>` + `data: <json>`, the Anthropic stream framing."""
    return b"event: " + name + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def data_frame(payload: object) -> bytes:
    """`data: <json>` only, the OpenAI chat stream framing."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE_FRAME = b"data: [DONE]\n\n"
