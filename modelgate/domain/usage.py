"""Reading token usage out of upstream answers, in every wire format the gateway relays.

Complete JSON answers are parsed once. Streams are scanned incrementally: only complete SSE events whose
bytes hold a usage object are parsed, so the cost per chunk is a few counts and substring searches in C;
the generated text relayed (what an answer cut short is charged by when no usage arrived) is measured by a
regex pass only when asked for or in batches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from modelgate.config.schema import DEFAULT_SERVICE_TIERS

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
    """Usage read from an upstream answer: every kind a provider bills by.

    Totals and their parts: `input_tokens` is every prompt token the provider counted, its cache reads
    (`cached_input_tokens`), cache writes (5-minute and 1-hour) and audio and image tokens included;
    `output_tokens` is every generated token, its reasoning, audio and image tokens included. The price
    sheet (modelgate/domain/prices.py) charges each part at its rate and the rest at the text rate, so no
    token is charged twice whichever way a provider counts.
    """

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
    cache_write_5m_tokens: int = 0  # parts of input_tokens
    cache_write_1h_tokens: int = 0
    input_audio_tokens: int = 0
    input_image_tokens: int = 0
    reasoning_tokens: int = 0  # parts of output_tokens
    output_audio_tokens: int = 0
    output_image_tokens: int = 0
    web_search_calls: int = 0  # server-side tool calls, priced per call
    file_search_calls: int = 0
    code_interpreter_calls: int = 0
    image_variant: str = ""  # "1024x1024/high": the size and quality the images were made at
    service_tier: str = ""  # the tier the provider says it served the request on ("" = default)

    def detail(self) -> dict[str, int | float | str] | None:
        """The kinds beyond input, cached and output tokens that are present (None when none is), for
        the ledger row's audit column."""
        found = None
        for name in DETAIL_KINDS:
            value = getattr(self, name)
            if value:
                if found is None:
                    found = {}
                found[name] = value
        return found


def usage_detail(usage: Usage) -> str:
    """The ledger row's `usage_detail`: JSON of the kinds beyond its token columns, "" when none is present
    (the usual answer: nothing is encoded, and one chain of attribute reads tells so, ~0.3 us)."""
    if not (
        usage.reasoning_tokens
        or usage.cache_write_5m_tokens
        or usage.cache_write_1h_tokens
        or usage.input_audio_tokens
        or usage.input_image_tokens
        or usage.output_audio_tokens
        or usage.output_image_tokens
        or usage.web_search_calls
        or usage.file_search_calls
        or usage.code_interpreter_calls
        or usage.images
        or usage.audio_seconds
        or usage.video_seconds
        or usage.service_tier
    ):
        return ""
    found = usage.detail()
    return orjson.dumps(found).decode() if found else ""


# The kinds kept in a ledger row's `usage_detail` (only those present), beside its token columns.
DETAIL_KINDS = (
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "input_audio_tokens",
    "input_image_tokens",
    "reasoning_tokens",
    "output_audio_tokens",
    "output_image_tokens",
    "web_search_calls",
    "file_search_calls",
    "code_interpreter_calls",
    "images",
    "image_variant",
    "audio_seconds",
    "video_seconds",
    "service_tier",
)
# Responses API output items that are billed per call, by the Usage field that counts them.
_TOOL_ITEMS = {
    "web_search_call": "web_search_calls",
    "file_search_call": "file_search_calls",
    "code_interpreter_call": "code_interpreter_calls",
}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def merge_usage(target: Usage, usage: dict, holder: dict | None = None) -> None:
    """Fold one `usage` object into `target`: OpenAI chat / completions / embeddings / Responses / realtime
    (their `*_details`), Anthropic (cache reads and writes with their 5m/1h split, server tool use), and
    the chat usage the Bedrock Converse and Gemini dialects translate theirs into. `holder` is the object
    the usage belongs to (a chat completion, a Response, a Message): its service tier and the Responses
    tool calls it made are read from it.

    Streams report usage in several events (Anthropic: message_start, then cumulative message_delta;
    Responses: the final response): every count is the largest seen, so repeating one never adds to it.
    Runs once per answer: the kinds an answer lacks cost one dict lookup each, no call (`_int` inlined).
    """
    get = usage.get
    value = get("prompt_tokens")
    prompt = value if type(value) is int and value > 0 else 0
    if prompt:
        input_tokens = prompt
    else:
        value = get("input_tokens")
        input_tokens = value if type(value) is int and value > 0 else 0
    cached = write_5m = write_1h = 0
    if (
        "cache_read_input_tokens" in usage
        or "cache_creation_input_tokens" in usage
        or "cache_creation" in usage
    ):
        # Anthropic's input_tokens exclude cache reads and writes (counted beside them): added here to make
        # the total OpenAI's prompt_tokens and Responses' input_tokens are (they include them).
        cached = _int(get("cache_read_input_tokens"))
        creation = get("cache_creation")
        if type(creation) is dict:
            write_5m = _int(creation.get("ephemeral_5m_input_tokens"))
            write_1h = _int(creation.get("ephemeral_1h_input_tokens"))
        # The plain count is the 5-minute kind; a split that accounts for less leaves the rest at 5 minutes.
        write_5m += max(_int(get("cache_creation_input_tokens")) - write_5m - write_1h, 0)
        if not prompt:
            input_tokens += cached + write_5m + write_1h
    details = get("prompt_tokens_details") or get("input_tokens_details") or get("input_token_details")
    if type(details) is dict:
        value = details.get("cached_tokens")
        if type(value) is int and value > cached:
            cached = value
        value = details.get("cache_write_tokens")
        if value:
            # OpenAI's cache writes: the short retention at the 5-minute rate, the 12-hour one at the 1-hour
            # rate; Bedrock Converse's 1-hour writes (its `cacheDetails`, as the dialect translates them) too.
            retention = details.get("cache_write_tokens_details")
            long_write = (
                _int(retention.get("ttl_12h_tokens")) + _int(retention.get("ttl_1h_tokens"))
                if type(retention) is dict
                else 0
            )
            write_1h = max(write_1h, long_write)
            write_5m = max(write_5m, _int(value) - long_write)
        audio, image = details.get("audio_tokens"), details.get("image_tokens")
        if audio or image:
            # Audio and image tokens read from the cache are among the cached ones (at the cached rate).
            parts = details.get("cached_tokens_details")
            parts = parts if type(parts) is dict else {}
            audio = _int(audio) - _int(parts.get("audio_tokens"))
            image = _int(image) - _int(parts.get("image_tokens"))
            if audio > target.input_audio_tokens:
                target.input_audio_tokens = audio
            if image > target.input_image_tokens:
                target.input_image_tokens = image
    elif not cached:
        cached = _int(get("prompt_cache_hit_tokens"))  # DeepSeek's
    value = get("completion_tokens") or get("output_tokens")
    output_tokens = value if type(value) is int and value > 0 else 0
    out = get("completion_tokens_details") or get("output_tokens_details") or get("output_token_details")
    if type(out) is dict:
        value = out.get("reasoning_tokens") or out.get("thinking_tokens")
        if type(value) is int and value > target.reasoning_tokens:
            target.reasoning_tokens = value
        value = out.get("audio_tokens")
        if type(value) is int and value > target.output_audio_tokens:
            target.output_audio_tokens = value
        value = out.get("image_tokens")
        if type(value) is int and value > target.output_image_tokens:
            target.output_image_tokens = value
    tools = get("server_tool_use")
    if type(tools) is dict:
        value = _int(tools.get("web_search_requests"))
        if value > target.web_search_calls:
            target.web_search_calls = value
    if target.input_tokens < input_tokens:
        target.input_tokens = input_tokens
    if target.cached_input_tokens < cached:
        target.cached_input_tokens = cached
    if target.output_tokens < output_tokens:
        target.output_tokens = output_tokens
    if target.cache_write_5m_tokens < write_5m:
        target.cache_write_5m_tokens = write_5m
    if target.cache_write_1h_tokens < write_1h:
        target.cache_write_1h_tokens = write_1h
    tier = get("service_tier")
    if holder is not None:
        tier = tier or holder.get("service_tier")
        items = holder.get("output")
        if type(items) is list and items:
            _count_tool_items(target, items)
    if type(tier) is str:
        target.service_tier = "" if tier in DEFAULT_SERVICE_TIERS else tier
    if get("estimated") is True:
        target.estimated = True


def _raise(target: Usage, name: str, value: int) -> None:
    if value > getattr(target, name):
        setattr(target, name, value)


def _count_tool_items(target: Usage, items: list) -> None:
    """The billed tool calls among a Response's output items (counted whole: a final Response lists all)."""
    counts: dict[str, int] = {}
    for item in items:
        if isinstance(item, dict):
            field = _TOOL_ITEMS.get(item.get("type"))  # type: ignore[arg-type]
            if field is not None:
                counts[field] = counts.get(field, 0) + 1
    for field, count in counts.items():
        _raise(target, field, count)


def usage_objects(document: Any) -> list[dict]:
    """The usage objects of one JSON document or event (top level, or inside `response` / `message`)."""
    return [usage for usage, _ in usage_holders(document)]


def usage_holders(document: Any) -> list[tuple[dict, dict]]:
    """(usage, the object holding it) of one JSON document or event."""
    found = []
    if isinstance(document, dict):
        for holder in (document, document.get("response"), document.get("message")):
            if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
                found.append((holder["usage"], holder))
    return found


def usage_of_body(body: bytes) -> Usage | None:
    """Usage of a complete (non-streamed) JSON answer, or None when it reports none."""
    if _USAGE not in body:
        return None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    objects = usage_holders(document)
    if not objects:
        return None
    usage = Usage()
    for item, holder in objects:
        merge_usage(usage, item, holder)
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

    `feed` returns the chunk as it came, so it is itself a relayed stream's step for each piece
    (plugins/usage_metering.py); what its caller would look at after each piece is told instead, once, to
    the callbacks given to `watch`.
    """

    __slots__ = (
        "_carry",
        "_markers",
        "_on_final",
        "_on_usage",
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
        self.searched: tuple[bytes, int, Sequence[tuple[int, int]]] | None = None
        self._on_usage: Callable[[Usage], None] | None = None
        self._on_final: Callable[[], None] | None = None

    @property
    def generated(self) -> tuple[int, int]:
        """(pieces, bytes) of generated text in the chunks fed so far."""
        if self._unmeasured:
            self._measure()
        return self._pieces, self._size

    @property
    def content_tokens(self) -> int:
        return tokens_of(*self.generated)

    def watch(self, on_usage: Callable[[Usage], None], on_final: Callable[[], None] | None) -> None:
        """Call `on_usage` with the usage object once the stream's first usage is read, and `on_final` once
        its final event is seen (each at once if that happened already); each is let go of once called, and
        both by `unwatch` (the request's completion) when the stream ended before."""
        self._on_usage, self._on_final = on_usage, on_final
        if self.usage is not None:
            self._tell_usage()
        if self.final:
            self._tell_final()

    def unwatch(self) -> None:
        """Let go of the callbacks not called yet (they hold the request: a reference cycle until then)."""
        self._on_usage = self._on_final = None

    def feed(self, chunk: bytes) -> bytes:
        """Read `chunk`; returns it unchanged."""
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
                    if self._on_final is not None:
                        self._tell_final()
                    break
        end = len(data)
        if not data.endswith(b"\n\n"):  # the usual chunk ends its last event: nothing to carry
            end = complete_events_end(data)
            self._carry = data[end:] if len(data) - end <= _MAX_CARRY else b""
        elif carry:
            self._carry = b""
        if end:
            found = usage_objects_at(data, end)
            self.searched = (data, end, found)
            if found:  # about one chunk a stream
                self._merge(data, end, found)
        return chunk

    def _tell_usage(self) -> None:
        on_usage, self._on_usage = self._on_usage, None
        if on_usage is not None and self.usage is not None:
            on_usage(self.usage)

    def _tell_final(self) -> None:
        on_final, self._on_final = self._on_final, None
        if on_final is not None:
            on_final()

    def _measure(self) -> None:
        for chunk in self._unmeasured:
            for match in _GENERATED.finditer(chunk):
                self._pieces += 1
                self._size += match.end(1) - match.start(1)
        self._unmeasured.clear()
        self._unmeasured_size = 0

    def _merge(self, data: bytes, end: int, found: Sequence[tuple[int, int]]) -> None:
        """Merge the usage of each `data:` line in data[:end] that holds a usage object (`found`)."""
        done = 0  # lines before this are read
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
            for item, holder in usage_holders(document):
                if self.usage is None:
                    self.usage = Usage()
                    if self._on_usage is not None:
                        self._tell_usage()  # the object itself: what is merged into it later is seen too
                merge_usage(self.usage, item, holder)


def usage_objects_at(data: bytes, end: int) -> Sequence[tuple[int, int]]:
    """The (start, end) of each `"usage"` key in data[:end] whose value is an object, up to its brace, in
    order.

    Counted before searched, because this is a cost every chunk of a stream pays: OpenAI-style streams
    repeat `"usage":null` in each chunk, so two counts in C (the keys, the null ones) tell whether any other
    is there, and the few others are looked for from the end, where the usage chunk is. A regex search
    stops at every quote of the chunk and costs several times more.
    """
    if end == len(data):  # the usual call: the whole chunk, searched without bounds to parse
        others = data.count(_USAGE)
        if others:
            others -= data.count(_USAGE_NULL)
    else:
        others = data.count(_USAGE, 0, end)
        if others:
            others -= data.count(_USAGE_NULL, 0, end)
    if others <= 0:
        return ()  # the usual chunk: no list made
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
