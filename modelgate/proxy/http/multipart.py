"""Streaming multipart/form-data: a client's body is followed chunk by chunk on its way upstream, never held.

The scanner counts the whole body and each part against the route group's limits as the bytes pass, and keeps
only small text fields (`model`, `n`, `seconds`, ...). The head of the body, up to the end of the `model`
field, is read before routing (that field names the model, so it must come before any file part); the rest
is relayed to the chosen row as it arrives, with back-pressure from the upstream back to the client.

A text guard (the content policy) sees each text field whole before any of its bytes are relayed: only that
field is held meanwhile (at most FIELD_MAX bytes), never a file part.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import Enum

from modelgate.domain.audio_duration import AudioProbe
from modelgate.domain.errors import GatewayError, InvalidRequest, RequestTooLarge
from modelgate.proxy.http.body_decoding import BodySource

MiB = 1024 * 1024
MODEL_FIRST = "the `model` field must come before file parts in multipart bodies"
FIELD_MAX = 64 * 1024  # text fields the gateway keeps; larger ones pass through unread (without a guard)
HEAD_MAX = 1 * MiB  # what may precede the end of the `model` field (held in memory before routing)
_HEADERS_MAX = 16 * 1024
_PREAMBLE_MAX = 16 * 1024

_DISPOSITION_PARAM = re.compile(r'(\w+)\*?=(?:"((?:[^"\\]|\\.)*)"|([^;]+))')

TextGuard = Callable[[str, str], str]  # (field name, value) -> the value to send; may raise a GatewayError


def request_too_large(limit: int) -> RequestTooLarge:
    """413 for a whole body over `limit` bytes."""
    size = f"{limit // MiB} MiB" if limit >= MiB else f"{limit} bytes"
    return RequestTooLarge(f"request body is larger than the {size} allowed on this route")


def field_too_large_to_check(name: str | None) -> InvalidRequest:
    """400 for a text field the text guard cannot hold whole."""
    return InvalidRequest(
        f"multipart text field {name or '?'!r} is larger than the {FIELD_MAX // 1024} KiB "
        "that can be checked against the content policy"
    )


def boundary_of(content_type: str) -> bytes:
    """The boundary parameter of a multipart Content-Type; 400 without one."""
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "boundary" and value.strip().strip('"'):
            boundary = value.strip().strip('"')
            if len(boundary) > 200:
                break
            return boundary.encode("latin-1", "replace")
    raise InvalidRequest("multipart body without a (valid) boundary parameter")


def _disposition(head: bytes) -> tuple[str | None, str | None]:
    """(name, filename) from a part's Content-Disposition header."""
    for line in head.decode("utf-8", "replace").split("\r\n"):
        header, _, value = line.partition(":")
        if header.strip().lower() == "content-disposition":
            params = {
                m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3).strip()
                for m in _DISPOSITION_PARAM.finditer(value)
            }
            return params.get("name"), params.get("filename")
    return None, None


@dataclass(frozen=True, slots=True)
class MultipartLimits:
    """Bytes allowed for the whole body and for one part."""

    total: int
    part: int


@dataclass(frozen=True, slots=True)
class TextField:
    """A complete text field: its name, its value, and the body offsets of the value's bytes."""

    name: str
    value: str
    start: int
    end: int


class _State(Enum):
    PREAMBLE = 1
    DELIMITER = 2
    HEADERS = 3
    CONTENT = 4
    EPILOGUE = 5


class MultipartScanner:
    """Follows a multipart body fed chunk by chunk; raises 413/400 the moment a limit or the syntax breaks.

    Only a delimiter's length of bytes is carried between chunks, so memory stays flat whatever the size.
    """

    __slots__ = (
        "_buffer",
        "_delimiter",
        "_field",
        "_limits",
        "_offset",
        "_part_name",
        "_part_size",
        "_part_start",
        "_probing",
        "_state",
        "complete",
        "completed",
        "fields",
        "file_before_model",
        "file_probe",
        "guarded",
        "oversized",
        "spans",
        "total",
    )

    def __init__(
        self, boundary: bytes, limits: MultipartLimits, file_probe: AudioProbe | None = None
    ) -> None:
        self._delimiter = b"\r\n--" + boundary
        # A virtual CRLF in front, so the opening delimiter looks like every other one.
        self._buffer = b"\r\n"
        self._offset = -2  # body offset of _buffer[0]
        self._limits = limits
        self._state = _State.PREAMBLE
        self._part_name: str | None = None
        self._part_size = 0
        self._part_start = 0
        self._field: bytearray | None = None
        self.total = 0
        self.fields: dict[str, str] = {}
        self.spans: dict[str, tuple[int, int]] = {}  # body offsets of each kept field's value
        self.file_before_model = False
        self.complete = False  # the closing delimiter was seen
        self.completed: list[TextField] = []  # every kept field, in body order, until `take_fields`
        self.guarded = False  # a text field too large to keep is refused instead of passed through
        self.oversized: str | None = None  # the first text field that was too large to keep
        # Reads the duration of the first file part named `file` as it passes (an audio upload's).
        self.file_probe = file_probe
        self._probing = False

    @property
    def held_from(self) -> int | None:
        """The body offset where the text field being read begins; None outside one."""
        if self._state is _State.CONTENT and self._field is not None:
            return self._part_start
        return None

    def take_fields(self) -> list[TextField]:
        """The fields completed since the last call, in body order."""
        fields, self.completed = self.completed, []
        return fields

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.total > self._limits.total:
            raise request_too_large(self._limits.total)
        if self._state is _State.EPILOGUE:
            return  # anything after the closing delimiter is ignored, as RFC 2046 says
        self._buffer = self._buffer + chunk if self._buffer else chunk
        while self._step():
            pass

    def finish(self) -> None:
        """The body ended: it must have been closed by the final delimiter."""
        if not self.complete:
            raise InvalidRequest("malformed multipart body: the closing boundary is missing")

    def _consume(self, n: int) -> None:
        self._buffer = self._buffer[n:]
        self._offset += n

    def _step(self) -> bool:
        """Advance through the buffer; False when more bytes are needed."""
        state, buffer = self._state, self._buffer
        if state is _State.CONTENT:
            return self._content()
        if state is _State.PREAMBLE:
            found = buffer.find(self._delimiter)
            if found < 0:
                keep = len(self._delimiter) - 1
                if self._offset + len(buffer) > _PREAMBLE_MAX:
                    raise InvalidRequest("malformed multipart body: it does not start with the boundary")
                if len(buffer) > keep:
                    self._consume(len(buffer) - keep)
                return False
            self._consume(found + len(self._delimiter))
            self._state = _State.DELIMITER
            return True
        if state is _State.DELIMITER:
            if len(buffer) < 2:
                return False
            if buffer.startswith(b"--"):
                self.complete = True
                self._state = _State.EPILOGUE
                self._buffer = b""
                return False
            end = buffer.find(b"\r\n")
            if end < 0:
                if len(buffer) > 256:
                    raise InvalidRequest("malformed multipart body: a boundary line does not end")
                return False
            if buffer[:end].strip(b" \t"):
                raise InvalidRequest("malformed multipart body: text after a boundary")
            self._consume(end + 2)
            self._state = _State.HEADERS
            return True
        if state is _State.HEADERS:
            if buffer.startswith(b"\r\n"):
                head, used = b"", 2
            else:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > _HEADERS_MAX:
                        raise InvalidRequest("malformed multipart body: a part's headers are too large")
                    return False
                head, used = buffer[:end], end + 4
            self._consume(used)
            self._begin_part(head)
            return True
        return False

    def _begin_part(self, head: bytes) -> None:
        name, filename = _disposition(head)
        if filename is not None and "model" not in self.fields:
            self.file_before_model = True
        self._part_name = name
        self._part_size = 0
        self._part_start = self._offset
        self._field = bytearray() if filename is None and name else None
        probe = self.file_probe
        self._probing = probe is not None and filename is not None and name == "file" and not probe.size
        self._state = _State.CONTENT

    def _content(self) -> bool:
        buffer = self._buffer
        found = buffer.find(self._delimiter)
        if found < 0:
            # Keep what could be the start of a delimiter split across chunks; the rest is content.
            safe = len(buffer) - (len(self._delimiter) - 1)
            if safe > 0:
                self._take(buffer[:safe])
                self._consume(safe)
            return False
        self._take(buffer[:found])
        self._end_part()
        self._consume(found + len(self._delimiter))
        self._state = _State.DELIMITER
        return True

    def _take(self, content: bytes) -> None:
        self._part_size += len(content)
        if self._part_size > self._limits.part:
            raise RequestTooLarge(
                f"multipart part {self._part_name or '?'!r} is larger than the "
                f"{self._limits.part // MiB} MiB allowed for one part"
            )
        if self._probing and self.file_probe is not None:
            self.file_probe.feed(content)
        field = self._field
        if field is not None:
            if len(field) + len(content) > FIELD_MAX:
                if self.guarded:
                    raise field_too_large_to_check(self._part_name)
                self._field = None  # too large to keep: it passes through unread
                self.oversized = self.oversized or self._part_name
            else:
                field += content

    def _end_part(self) -> None:
        if self._probing:
            self._probing = False
            if self.file_probe is not None:
                self.file_probe.finish()
        name = self._part_name
        if self._field is not None and name:
            value = self._field.decode("utf-8", "replace")
            start, end = self._part_start, self._part_start + self._part_size
            self.fields[name] = value
            self.spans[name] = (start, end)
            self.completed.append(TextField(name, value, start, end))
        self._field = None


class StreamedMultipart:
    """A client's multipart body on its way upstream: the head is read before routing, the rest is relayed
    as it arrives. Iterating it (once) yields the body's bytes; a broken limit ends it with `error` set."""

    def __init__(
        self,
        content: BodySource,
        content_type: str,
        limits: MultipartLimits,
        declared: int | None,
        file_probe: AudioProbe | None = None,
    ) -> None:
        self.content_type = content_type
        self._content = content
        self._scanner = MultipartScanner(boundary_of(content_type), limits, file_probe)
        self._head = b""
        self._head_fields: list[TextField] = []  # the head's fields, for a guard installed after routing
        self._length = declared
        self._guard: TextGuard | None = None
        # Field values sent in place of the client's: start offset -> (end offset, bytes), applied as the
        # bytes are relayed, so every offset stays the client's.
        self._edits: dict[int, tuple[int, bytes]] = {}
        self._held = b""  # bytes of a text field not yet checked, from body offset `_held_at`
        self._held_at = 0
        self.error: GatewayError | None = None

    @property
    def length(self) -> int | None:
        """The Content-Length to send upstream: the client's, adjusted to the edits; None when not known."""
        return self._length

    @property
    def complete(self) -> bool:
        """Whether the whole body has arrived (its closing boundary was read)."""
        return self._scanner.complete

    @property
    def file_probe(self) -> AudioProbe | None:
        """What was read of the uploaded audio file (its duration, once the part has passed)."""
        return self._scanner.file_probe

    @property
    def fields(self) -> dict[str, str]:
        """The small text fields seen so far (all of them once the body has been relayed)."""
        return self._scanner.fields

    async def read_head(self) -> dict[str, str]:
        """Read up to the end of the `model` field; 400 when a file part comes first."""
        scanner, chunks, size = self._scanner, [], 0
        while "model" not in scanner.fields and not scanner.file_before_model and not scanner.complete:
            chunk = await self._content.readany()
            if not chunk:
                scanner.finish()
                break
            scanner.feed(chunk)
            chunks.append(chunk)
            size += len(chunk)
            if size > HEAD_MAX and "model" not in scanner.fields:
                raise InvalidRequest(f"{MODEL_FIRST}, within the first {HEAD_MAX // MiB} MiB")
        if scanner.file_before_model:
            raise InvalidRequest(MODEL_FIRST)
        self._head = b"".join(chunks)
        self._head_fields = scanner.take_fields()
        return dict(scanner.fields)

    def rewrite_model(self, name: str) -> None:
        """Name the row's upstream model in the head: the client's model name never leaves the gateway."""
        span = self._scanner.spans.get("model")
        if span is None or self._scanner.fields.get("model") == name:
            return
        self._edit(*span, name.encode())
        self._scanner.fields["model"] = name

    def set_text_guard(self, guard: TextGuard) -> None:
        """Check every text field but `model` with `guard(name, value)` before its bytes leave the gateway;
        the value it returns is sent instead. Install it before the body is relayed: the head's fields are
        checked now (a GatewayError it raises is the caller's), the others as they complete."""
        scanner = self._scanner
        if scanner.oversized is not None:
            raise field_too_large_to_check(scanner.oversized)
        self._guard = guard
        scanner.guarded = True
        fields, self._head_fields = self._head_fields, []
        for field in fields:
            self._check(field)
        if not scanner.complete:
            # A field still to come may change length once the headers are out: the upload goes chunked.
            self._length = None

    def _check(self, field: TextField) -> None:
        if field.name == "model" or self._guard is None:
            return  # the model field names the row's model (rewrite_model), not text for the model
        value = self._guard(field.name, field.value)
        if value == field.value:
            return  # the client's own bytes go out, even those that were not valid UTF-8
        self._edit(field.start, field.end, value.encode("utf-8", "replace"))
        if self._scanner.spans.get(field.name) == (field.start, field.end):
            self._scanner.fields[field.name] = value

    def _edit(self, start: int, end: int, replacement: bytes) -> None:
        previous = self._edits.get(start)
        was = end - start if previous is None else len(previous[1])
        self._edits[start] = (end, replacement)
        if self._length is not None:
            self._length += len(replacement) - was

    def _release(self, data: bytes) -> bytes:
        """What may go upstream now that `data` (the next bytes of the body, already scanned) is in: the
        bytes before any text field still being read, with the fields' edits applied."""
        fields = self._scanner.take_fields()
        if self._guard is None and not self._edits:
            self._held_at += len(data)
            return data
        for field in fields:
            self._check(field)
        pending, at = self._held + data, self._held_at
        held_from = self._scanner.held_from if self._guard is not None else None
        until = at + len(pending) if held_from is None else held_from
        out = []
        for start in sorted(self._edits):
            end, replacement = self._edits[start]
            if end > until:
                break
            out += (pending[: start - at], replacement)
            pending, at = pending[end - at :], end
            del self._edits[start]
        out.append(pending[: until - at])
        self._held, self._held_at = pending[until - at :], until
        return b"".join(out)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._relay()

    async def _relay(self) -> AsyncIterator[bytes]:
        head, self._head = self._head, b""
        scanner = self._scanner
        try:
            if head and (out := self._release(head)):
                yield out
            while True:
                chunk = await self._content.readany()
                if not chunk:
                    break
                scanner.feed(chunk)
                if out := self._release(chunk):
                    yield out
            scanner.finish()
        except GatewayError as error:
            # Raising here aborts the upstream request; the forwarder answers with this error.
            self.error = error
            raise
