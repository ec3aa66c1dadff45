"""AWS event-stream framing (`application/vnd.amazon.eventstream`), decoded as the bytes arrive.

Bedrock's streamed answers (InvokeModelWithResponseStream, ConverseStream) are binary frames:

    total length (4) | headers length (4) | prelude CRC32 (4) | headers | payload | message CRC32 (4)

all integers big-endian, each header `name length (1) | name | type (1) | value`. A frame says what it is in
its `:message-type` header (`event`, `exception`, `error`) and `:event-type` / `:exception-type`. Anything
that does not add up (a CRC, a length, a header type) is an answer the gateway cannot read: `broken`.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import orjson

from modelgate.proxy.upstream.dialects.base import broken

_PRELUDE = 12  # total length, headers length, prelude CRC
_MIN_FRAME = _PRELUDE + 4  # no headers, no payload: the prelude and the message CRC
# Bedrock's frames hold one event (a few KiB); a bigger claimed length is a corrupt prelude, not a frame to
# wait for.
MAX_FRAME = 16 * 1024 * 1024

# Fixed-size header values by type: true, false, byte, short, integer, long, (bytes, string), timestamp, uuid.
_FIXED_SIZES = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded message: its headers (strings and byte strings as such, numbers as ints) and payload."""

    headers: dict[str, str | bytes | int | bool]
    payload: bytes

    @property
    def message_type(self) -> str:
        return str(self.headers.get(":message-type", "event"))

    @property
    def event_type(self) -> str:
        return str(self.headers.get(":event-type", ""))

    @property
    def exception_type(self) -> str:
        """The exception's name (`throttlingException`), or an error frame's code."""
        return str(self.headers.get(":exception-type") or self.headers.get(":error-code") or "")


def frame_length(data: bytes | bytearray) -> int | None:
    """The length the frame at the start of `data` claims, or None while its prelude is incomplete."""
    if len(data) < _PRELUDE:
        return None
    return int.from_bytes(data[:4], "big")


def starts_with_frame(data: bytes) -> bool:
    """Whether `data` holds at least one whole frame (or a prelude that can never be one)."""
    length = frame_length(data)
    return length is not None and (len(data) >= length or not _MIN_FRAME <= length <= MAX_FRAME)


class EventStreamDecoder:
    """Frames out of a byte stream fed in pieces of any size; keeps only an incomplete frame's bytes."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[Frame]:
        """The frames completed by `chunk` (raises `broken` on a frame that fails its checks)."""
        buffer = self._buffer
        buffer += chunk
        frames: list[Frame] = []
        start = 0
        while (length := frame_length(buffer[start : start + _PRELUDE])) is not None:
            if not _MIN_FRAME <= length <= MAX_FRAME:
                raise broken(f"event-stream frame claims {length} bytes")
            if len(buffer) - start < length:
                break
            frames.append(_decode(bytes(buffer[start : start + length])))
            start += length
        if start:
            del buffer[:start]
        return frames

    def finish(self) -> None:
        """The stream ended: an incomplete frame left over is a broken answer."""
        if self._buffer:
            raise broken(f"event stream ended inside a frame ({len(self._buffer)} bytes)")


def _decode(frame: bytes) -> Frame:
    total, headers_length, prelude_crc = struct.unpack_from(">III", frame)
    if zlib.crc32(frame[:8]) != prelude_crc:
        raise broken("event-stream prelude CRC mismatch")
    (message_crc,) = struct.unpack_from(">I", frame, total - 4)
    if zlib.crc32(frame[: total - 4]) != message_crc:
        raise broken("event-stream message CRC mismatch")
    headers_end = _PRELUDE + headers_length
    if headers_end > total - 4:
        raise broken("event-stream headers overrun the frame")
    try:
        headers = _headers(frame[_PRELUDE:headers_end])
    except (IndexError, struct.error, UnicodeDecodeError):
        raise broken("event-stream headers are malformed") from None
    return Frame(headers, frame[headers_end : total - 4])


def _headers(data: bytes) -> dict[str, str | bytes | int | bool]:
    headers: dict[str, str | bytes | int | bool] = {}
    at = 0
    while at < len(data):
        name_length = data[at]
        name = data[at + 1 : at + 1 + name_length].decode("utf-8")
        at += 1 + name_length
        kind = data[at]
        at += 1
        value: str | bytes | int | bool
        if kind in (6, 7):
            (size,) = struct.unpack_from(">H", data, at)
            raw = data[at + 2 : at + 2 + size]
            if len(raw) != size:
                raise IndexError(name)
            value = raw.decode("utf-8") if kind == 7 else raw
            at += 2 + size
        elif kind in _FIXED_SIZES:
            size = _FIXED_SIZES[kind]
            raw = data[at : at + size]
            if len(raw) != size:
                raise IndexError(name)
            value = kind == 0 if kind < 2 else (raw if kind == 9 else int.from_bytes(raw, "big", signed=True))
            at += size
        else:
            raise IndexError(f"header type {kind}")
        headers[name] = value
    return headers


class EventStreamTransform:
    """An `AnswerTransform` over event-stream frames: each event frame's JSON payload goes to `event`, an
    exception or error frame breaks the stream off (the gateway ends it with an error event)."""

    def __init__(self) -> None:
        self.decoder = EventStreamDecoder()

    def feed(self, chunk: bytes) -> bytes:
        out = b""
        for frame in self.decoder.feed(chunk):
            if frame.message_type != "event":
                kind = frame.exception_type or "an error"
                raise broken(f"the stream ended with {kind}: {frame_message(frame)}")
            out += self.event(frame.event_type, frame_json(frame))
        return out

    def finish(self) -> bytes:
        self.decoder.finish()
        return self.end()

    def event(self, name: str, payload: dict) -> bytes:
        """The rewritten bytes for one event."""
        raise NotImplementedError

    def end(self) -> bytes:
        """What closes the rewritten stream (raise `broken` if the host's stream ended too early)."""
        raise NotImplementedError


def frame_json(frame: Frame) -> dict:
    """A frame's payload as the JSON object it must be."""
    try:
        payload = orjson.loads(frame.payload) if frame.payload else {}
    except orjson.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        raise broken(f"event {frame.event_type or frame.message_type!r} is not a JSON object")
    return payload


def frame_message(frame: Frame) -> str:
    """The message of an exception frame (`{"message": ...}`) or an error frame (`:error-message`)."""
    if frame.message_type == "error":
        return str(frame.headers.get(":error-message", ""))
    try:
        payload = orjson.loads(frame.payload)
    except orjson.JSONDecodeError:
        return frame.payload[:200].decode("utf-8", "replace")
    if isinstance(payload, dict):
        return str(payload.get("message") or payload.get("Message") or "")
    return ""
