"""Reading token usage out of upstream answers, in every wire format the gateway relays.

Complete JSON answers are parsed once. Streams are scanned incrementally: only complete SSE events whose
bytes hold a usage object are parsed, so the cost per chunk is a few counts and substring searches in C;
the generated text relayed (what an answer cut short is charged by when no usage arrived) is measured by a
regex pass only when asked for or in batches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

_USAGE = b'"usage"'
# A usage object, not `"usage": null` (which OpenAI-style streams repeat in every chunk): only events that
# hold one are decoded.
_USAGE_NULL = b'"usage":null'
_OBJECT_VALUE = re.compile(rb"\s*:\s*\{")  # after a `"usage"` key: the value is an object
_MAX_CARRY = 256 * 1024
# Chunks kept by reference, unmeasured, at most this many bytes of them.
_MEASURE_ABOVE = 16 * 1024
# Generated text in every wire format relayed: chat `content`, completions and Anthropic `text`, Responses
# `delta`, tool-call `arguments` / `partial_json`, `refusal`, `thinking`. An object-valued key (chat's
# `"delta": {...}`) does not match. Escapes count as their bytes: an estimate errs high, and is capped.
# The string is unrolled (a run of plain bytes, then escapes each with their run) for speed.
_GENERATED = re.compile(
    rb'"(?:content|text|delta|arguments|partial_json|refusal|thinking|reasoning_content)":\s*'
    rb'"([^"\\]+(?:\\.[^"\\]*)*|(?:\\.[^"\\]*)+)"'
)
# The last event of a complete stream, by wire format (a route's `final_events`,
# proxy.pipeline.route_table); a route of another format (or a stream translated from one) looks for any.
OPENAI_DONE = (b"data: [DONE]",)
MESSAGE_STOP = (b'"message_stop"',)
RESPONSE_DONE = (b'"response.completed"', b'"response.incomplete"')
ANY_FINAL_EVENT = (b"data: [DONE]", b"message_stop", b'"response.completed"', b'"response.incomplete"')
BYTES_PER_TOKEN = 4


@dataclass(slots=True)
class Usage:
    """Token usage read from an upstream answer."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    # Media units of image, audio and video answers (priced per image / audio second / video second).
    images: int = 0
    audio_seconds: float = 0.0
    video_seconds: float = 0.0
    # Counted by an estimate, not reported by the provider: a host that reports none (its client marks its
    # usage `"estimated": true`), or the gateway's own estimate of an answer cut short
    # (modelgate/plugins/billing_gate.py).
    estimated: bool = False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def merge_usage(target: Usage, usage: dict) -> None:
    """Fold one `usage` object (OpenAI chat/completions/embeddings, Responses, Anthropic) into `target`."""
    input_tokens = _int(usage.get("prompt_tokens")) or _int(usage.get("input_tokens"))
    cache_read = _int(usage.get("cache_read_input_tokens"))
    cache_write = _int(usage.get("cache_creation_input_tokens"))
    if cache_read or cache_write:
        # Anthropic counts cached and cache-writing tokens outside input_tokens.
        input_tokens += cache_read + cache_write
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    cached = cached or cache_read
    output_tokens = _int(usage.get("completion_tokens")) or _int(usage.get("output_tokens"))
    # Streams report usage in several events (Anthropic: message_start, then cumulative message_delta).
    target.input_tokens = max(target.input_tokens, input_tokens)
    target.cached_input_tokens = max(target.cached_input_tokens, cached)
    target.output_tokens = max(target.output_tokens, output_tokens)
    if usage.get("estimated") is True:
        target.estimated = True


def usage_objects(document: Any) -> list[dict]:
    """The usage objects of one JSON document or event (top level, or inside `response` / `message`)."""
    found = []
    if isinstance(document, dict):
        for holder in (document, document.get("response"), document.get("message")):
            if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                found.append(holder["usage"])
    return found


def usage_of_body(body: bytes) -> Usage | None:
    """Usage of a complete (non-streamed) JSON answer, or None when it reports none."""
    if _USAGE not in body:
        return None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    objects = usage_objects(document)
    if not objects:
        return None
    usage = Usage()
    for item in objects:
        merge_usage(usage, item)
    return usage


def generated_tokens(data: bytes) -> tuple[int, int]:
    """(pieces, bytes) of generated text in a stretch of an answer."""
    pieces = size = 0
    for match in _GENERATED.finditer(data):
        pieces += 1
        size += match.end(1) - match.start(1)
    return pieces, size


def tokens_of(pieces: int, size: int) -> int:
    """Estimated tokens of generated text: ~4 bytes a token, and at least one per piece streamed."""
    return max(pieces, -(-size // BYTES_PER_TOKEN))


class StreamUsageScanner:
    """Finds usage in an SSE stream as it passes, across chunk boundaries, without holding the stream; also
    measures the generated text relayed and notices the stream's final event.

    Per chunk: a substring search for the route's final event and a search for a usage object; only events
    carrying one (about one a stream) are decoded, and a chunk that ends its last event is never copied.
    The generated text is measured only when asked for (a stream that ended without usage) or once 16 KiB
    of chunks are waiting: the chunks are kept by reference until then, so a complete stream never pays
    for the regex.
    """

    __slots__ = (
        "_carry",
        "_markers",
        "_pieces",
        "_size",
        "_unmeasured",
        "_unmeasured_size",
        "final",
        "searched",
        "usage",
    )

    def __init__(self, final_events: tuple[bytes, ...] = ANY_FINAL_EVENT) -> None:
        self.usage: Usage | None = None
        self._carry = b""
        self._markers = final_events
        self._unmeasured: list[bytes] = []
        self._unmeasured_size = 0
        self._pieces = 0
        self._size = 0
        self.final = False
        # The last search for usage objects: (the bytes, where the search ended, what it found). The usage
        # filter, fed the same chunk after the metering (the same object unless a row renamed the model in
        # between), takes it from here rather than searching again (modelgate/domain/answer_filters.py).
        self.searched: tuple[bytes, int, list[tuple[int, int]]] | None = None

    @property
    def generated(self) -> tuple[int, int]:
        """(pieces, bytes) of generated text in the chunks fed so far."""
        if self._unmeasured:
            self._measure()
        return self._pieces, self._size

    @property
    def content_tokens(self) -> int:
        return tokens_of(*self.generated)

    def feed(self, chunk: bytes) -> None:
        self._unmeasured.append(chunk)
        self._unmeasured_size += len(chunk)
        if self._unmeasured_size > _MEASURE_ABOVE:
            self._measure()
        carry = self._carry
        data = carry + chunk if carry else chunk  # an event begun in an earlier chunk, completed here
        if not self.final:
            for marker in self._markers:
                if data.rfind(marker) >= 0:  # from the end, where the final event is: found at once
                    self.final = True
                    break
        end = len(data)
        if not data.endswith(b"\n\n"):  # the usual chunk ends its last event: nothing to carry
            end = complete_events_end(data)
            self._carry = data[end:] if len(data) - end <= _MAX_CARRY else b""
        elif carry:
            self._carry = b""
        if end:
            self._scan(data, end)

    def _measure(self) -> None:
        for chunk in self._unmeasured:
            for match in _GENERATED.finditer(chunk):
                self._pieces += 1
                self._size += match.end(1) - match.start(1)
        self._unmeasured.clear()
        self._unmeasured_size = 0

    def _scan(self, data: bytes, end: int) -> None:
        """Merge the usage of each `data:` line in data[:end] that holds a usage object."""
        done = 0  # lines before this are read
        found = usage_objects_at(data, end)
        self.searched = (data, end, found)
        for position, _ in found:
            if position < done:
                continue  # a second usage object in a line already read
            line_start = data.rfind(b"\n", 0, position) + 1
            done = data.find(b"\n", position, end)  # complete events end with a newline
            if not data.startswith(b"data:", line_start):
                continue
            try:
                document = orjson.loads(data[line_start + 5 : done])  # a CR ending the line is whitespace
            except orjson.JSONDecodeError:
                continue
            for item in usage_objects(document):
                if self.usage is None:
                    self.usage = Usage()
                merge_usage(self.usage, item)


def usage_objects_at(data: bytes, end: int) -> list[tuple[int, int]]:
    """The (start, end) of each `"usage"` key in data[:end] whose value is an object, up to its brace, in
    order.

    Counted before searched, because this is a cost every chunk of a stream pays: OpenAI-style streams
    repeat `"usage":null` in each chunk, so two counts in C (the keys, the null ones) tell whether any other
    is there, and the few others are looked for from the end, where the usage chunk is. A regex search
    stops at every quote of the chunk and costs several times more.
    """
    others = data.count(_USAGE, 0, end)
    if others:
        others -= data.count(_USAGE_NULL, 0, end)
    found: list[tuple[int, int]] = []
    position = end
    while others > 0:
        position = data.rfind(_USAGE, 0, position)
        if position < 0:
            break
        if data.startswith(_USAGE_NULL, position):
            continue
        others -= 1
        value = _OBJECT_VALUE.match(data, position + 7, end)
        if value is not None:
            found.append((position, value.end()))
    found.reverse()
    return found


def complete_events_end(data: bytes, start: int = 0, end: int | None = None) -> int:
    """Where the complete events of data[start:end] end: after its last blank line (LF LF or CR LF CR LF),
    else 0."""
    lf = data.rfind(b"\n\n", start, end)
    # A CR LF blank line after the last LF one ends later; one before it ends sooner. So only what follows
    # the LF one is searched, not (in the usual stream, which has none) the whole chunk a second time.
    crlf = data.rfind(b"\n\r\n", lf + 1 if lf >= 0 else start, end)
    if crlf >= 0:
        return crlf + 3
    return lf + 2 if lf >= 0 else 0
