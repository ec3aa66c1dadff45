"""Content rules on a streamed answer: a guard fed the client's SSE bytes, holding back only a window of text.

Each text channel (a chat choice's content, one tool call's arguments, a Responses output part, a Messages
content block) keeps its unreleased text. Every delta is appended and the channel's pending text rescanned,
so a match split across chunks and events is found; all but the last `window - 1` characters go out in the
delta's place, redacted. A channel's held text is flushed as a delta of its own just before the event that
ends the channel. Events that carry no text pass byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from modelgate.proxy.content.redaction import Hit, Scan, redact
from modelgate.proxy.translation.sse import SseEvent, SseParser, data_frame, named_frame

_CR = 13
_CHAT_TEXTS = ("content", "refusal")
_RESPONSE_DELTAS = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "refusal",
    "response.function_call_arguments.delta": "args",
}
# A part's `.done` event: the channel it ends and the field holding that channel's whole text.
_RESPONSE_DONES = {
    "response.output_text.done": ("text", "text"),
    "response.refusal.done": ("refusal", "refusal"),
    "response.function_call_arguments.done": ("args", "arguments"),
}
_PART_TEXTS: dict[object, tuple[str, str]] = {
    "output_text": ("text", "text"),
    "refusal": ("refusal", "refusal"),
}
_RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_RESPONSE_EVENTS = frozenset(
    {*_RESPONSE_DELTAS, *_RESPONSE_DONES, *_RESPONSE_ENDS, "response.content_part.done"}
    | {"response.output_item.done"}
)
_MESSAGE_TEXTS: dict[object, str] = {"text_delta": "text", "input_json_delta": "partial_json"}
_MESSAGE_EVENTS = frozenset({"content_block_delta", "content_block_stop", "message_delta", "message_stop"})
_DROP = False  # a handler's answer: leave the event out (its text is all held)

Key = tuple[Any, ...]  # a channel: its kind of text, then the indexes that tell it apart


class AnswerBlocked(Exception):
    """A block rule matched the streamed answer; `.hit` says which.

    `.tail` holds what this call had released before the match (safe to send before ending the stream).
    """

    def __init__(self, hit: Hit, tail: bytes = b"") -> None:
        super().__init__(f"content rule {hit.rule_id} ({hit.label}) blocked the answer")
        self.hit = hit
        self.tail = tail


class _Channel:
    """One text channel: the text not released yet, where it starts, the hits already reported."""

    __slots__ = ("base", "pending", "seen", "template", "watched")

    def __init__(self) -> None:
        self.base = 0  # offset of `pending` in the channel's whole text
        self.pending = ""
        self.watched = 0  # how much of `pending` a flag-only scan has already seen
        self.seen: set[tuple[str, int]] = set()  # (rule, absolute start) of hits given to `seen`
        self.template: tuple[str | None, dict[str, Any]] | None = None  # the last delta event: name, payload


class AnswerStreamGuard:
    """Passes an answer's SSE bytes on, redacting matches, holding back a window of text per channel."""

    __slots__ = (
        "_carry",
        "_channels",
        "_handle",
        "_hold",
        "_keep",
        "_line",
        "_parser",
        "_released",
        "_rewrote",
        "_scan",
        "_seen",
        "_step",
        "_wholes",
        "_wire",
    )

    def __init__(self, wire: str, scan: Scan, window: int, hold: bool, seen: Callable[[Hit], None]) -> None:
        """wire: "chat" | "completions" | "responses" | "messages" (the client's SSE format); window: the
        longest match in chars; hold: whether text is held back (block or redact rules apply)."""
        handlers = {
            "chat": self._choices,
            "completions": self._choices,
            "responses": self._responses,
            "messages": self._messages,
        }
        if wire not in handlers:
            raise ValueError(f"no answer stream guard for the wire format {wire!r}")
        self._wire = wire
        self._handle = handlers[wire]
        self._scan = scan
        self._keep = max(window - 1, 0)
        self._step = max(self._keep, 256)  # flag-only: new text gathered between two scans
        self._hold = hold
        self._seen = seen
        self._parser = SseParser()
        self._carry = b""  # bytes of an event not complete yet (hold only)
        self._line = 0  # where in `_carry` the unfinished line starts
        self._channels: dict[Key, _Channel] = {}
        self._wholes: dict[tuple[Key, str], str] = {}  # a whole text → redacted, for the events repeating it
        self._released = 0
        self._rewrote = False

    @property
    def released_chars(self) -> int:
        """Text characters passed on so far (redacted text as the client got it)."""
        return self._released

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to pass on for `chunk`; raises AnswerBlocked when a block rule matched."""
        if not self._hold:
            # Nothing is held: the chunk goes on as it came, its events are only watched.
            for event in self._parser.feed(chunk):
                self._handle(event, [])
            return chunk
        untouched = not self._carry
        self._rewrote = False
        out: list[bytes] = []
        try:
            for raw in self._events(chunk):
                self._on_raw(raw, self._parser.feed(raw), out)
        except AnswerBlocked as blocked:
            blocked.tail = b"".join(out)
            raise
        if untouched and not self._carry and not self._rewrote:
            return chunk
        return b"".join(out)

    def finish(self) -> bytes:
        """The stream ended: an unterminated last event, then every channel's held text."""
        out: list[bytes] = []
        try:
            if not self._hold:
                for event in self._parser.finish():
                    self._handle(event, [])
                for channel in self._channels.values():
                    if len(channel.pending) > channel.watched:
                        self._watch(channel)
                return b""
            carry, self._carry = self._carry, b""
            if carry:
                self._on_raw(carry, self._parser.feed(carry) + self._parser.finish(), out)
            self._end(lambda key: True, (), out)
        except AnswerBlocked as blocked:
            blocked.tail = b"".join(out)
            raise
        return b"".join(out)

    # -- framing -----------------------------------------------------------------------------------

    def _events(self, chunk: bytes) -> list[bytes]:
        """The raw bytes of each event `chunk` completes, up to and including its blank line."""
        data = self._carry + chunk if self._carry else chunk
        find = data.find
        raws: list[bytes] = []
        start = 0  # where the current event starts
        line = self._line
        while True:
            end = find(b"\n", line)
            if end < 0:
                break
            if end == line or (end == line + 1 and data[line] == _CR):
                raws.append(data[start : end + 1])
                start = end + 1
            line = end + 1
        self._carry = data[start:]
        self._line = line - start
        return raws

    def _on_raw(self, raw: bytes, events: list[SseEvent], out: list[bytes]) -> None:
        if not events:  # a comment or keep-alive
            out.append(raw)
            return
        event = events[0]
        mark, released = len(out), self._released
        try:
            payload = self._handle(event, out)
        except AnswerBlocked:
            # Nothing of the blocked event goes out, so none of it counts as released either.
            del out[mark:]
            self._released = released
            raise
        if payload is None:
            out.append(raw)
            return
        self._rewrote = True
        if payload is not _DROP:
            out.append(_frame(event.name, payload))

    # -- text --------------------------------------------------------------------------------------

    def _channel(self, key: Key) -> _Channel:
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = _Channel()
        return channel

    def _advance(self, key: Key, text: str, ending: bool, name: str | None, payload: dict[str, Any]) -> str:
        """The text to send in place of the delta `text` of channel `key` (all held text when `ending`)."""
        channel = self._channel(key)
        channel.template = (name, payload)
        pending = channel.pending + text if channel.pending else text
        if not pending:
            return ""
        if not self._hold:
            # Nothing is held (flag rules only): the text is scanned once a step of it has gathered, and at
            # the end, so most deltas cost no scan; what a flag records does not need to be timely.
            self._released += len(text)
            channel.pending = pending
            if len(pending) >= self._keep + self._step:
                self._watch(channel)
            return text
        hits = self._scan(pending)
        if hits:
            self._report(channel, hits, channel.base)
        cut = len(pending) if ending else len(pending) - self._keep
        if cut <= 0:
            channel.pending = pending
            return ""
        if hits:
            if not ending:
                cut = _cut_outside_redactions(hits, cut)
            released = redact(pending[:cut], [hit for hit in hits if hit.end <= cut])
        else:
            released = pending[:cut]
        channel.pending = pending[cut:]
        channel.base += cut
        self._released += len(released)
        return released

    def _watch(self, channel: _Channel) -> None:
        """Scan a flag-only channel's gathered text; keep enough to find a match the next text completes."""
        pending = channel.pending
        hits = self._scan(pending)
        if hits:
            self._report(channel, hits, channel.base)
        kept = pending[len(pending) - self._keep :] if self._keep else ""
        channel.base += len(pending) - len(kept)
        channel.pending = kept
        channel.watched = len(kept)

    def _report(self, channel: _Channel, hits: Sequence[Hit], base: int) -> None:
        """Give each new hit to `seen` once (offsets into the channel's whole text); raise on a block hit."""
        for hit in hits:
            if hit.action == "block":
                hit = replace(hit, start=base + hit.start, end=base + hit.end)
                self._seen(hit)
                raise AnswerBlocked(hit)
        for hit in hits:
            mark = (hit.rule_id, base + hit.start)
            if mark not in channel.seen:
                channel.seen.add(mark)
                self._seen(replace(hit, start=base + hit.start, end=base + hit.end) if base else hit)

    def _whole(self, key: Key, text: str) -> str:
        """A channel's whole text, as an event repeating it must carry it: redacted whole."""
        if not self._hold or not text:
            return text
        redacted = self._wholes.get((key, text))
        if redacted is None:
            hits = self._scan(text)
            if hits:
                self._report(self._channel(key), hits, 0)
            redacted = self._wholes[key, text] = redact(text, hits) if hits else text
        return redacted

    def _replace_whole(self, holder: Any, field: str, key: Key) -> bool:
        """Redact the whole text in `holder[field]`; whether it changed."""
        text = holder.get(field) if isinstance(holder, dict) else None
        if not isinstance(text, str):
            return False
        redacted = self._whole(key, text)
        if redacted == text:
            return False
        holder[field] = redacted
        return True

    def _end(self, ends: Callable[[Key], bool], touched: Any, out: list[bytes]) -> None:
        """Flush the held text of the channels `ends` selects, each as a delta event of its own."""
        if not self._hold:
            return
        for key, channel in self._channels.items():
            if channel.pending and key not in touched and channel.template is not None and ends(key):
                name, payload = channel.template
                text = self._advance(key, "", True, name, payload)
                if text:
                    self._rewrote = True
                    out.append(_frame(name, self._flush_payload(key, payload, text)))

    def _flush_payload(self, key: Key, last: dict[str, Any], text: str) -> dict[str, Any]:
        """A delta event carrying `text`, shaped as the channel's last delta event."""
        if self._wire in ("chat", "completions"):
            head = {k: v for k, v in last.items() if k not in ("choices", "usage")}
            if self._wire == "completions":
                choice = {"text": text, "index": key[1], "logprobs": None, "finish_reason": None}
            elif key[0] == "tool":
                calls = [{"index": key[2], "function": {"arguments": text}}]
                choice = {"index": key[1], "delta": {"tool_calls": calls}, "finish_reason": None}
            else:
                choice = {"index": key[1], "delta": {key[0]: text}, "finish_reason": None}
            head["choices"] = [choice]
            return head
        if self._wire == "responses":
            flushed = {**last, "delta": text}
            if "logprobs" in flushed:
                flushed["logprobs"] = []
            return flushed
        delta = last["delta"]
        return {**last, "delta": {**delta, _MESSAGE_TEXTS[delta["type"]]: text}}

    # -- formats: each handler returns None (pass the event as it came), a payload to send, or _DROP ------

    def _choices(self, event: SseEvent, out: list[bytes]) -> Any:
        """Chat and completions chunks: a channel per choice (and tool call), ended by its finish_reason."""
        if event.data == b"[DONE]":
            self._end(lambda key: True, (), out)
            return None
        chunk = _payload(event)
        changed = False
        for choice in (chunk.get("choices") if chunk else None) or ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            ending = choice.get("finish_reason") is not None
            touched: list[Key] = []
            if self._wire == "completions":
                changed |= self._delta(choice, "text", ("text", index), ending, event, chunk, touched)
            elif isinstance(delta := choice.get("delta"), dict):
                for field in _CHAT_TEXTS:
                    changed |= self._delta(delta, field, (field, index), ending, event, chunk, touched)
                for call in delta.get("tool_calls") or ():
                    function = call.get("function") if isinstance(call, dict) else None
                    key = ("tool", index, call.get("index", 0)) if function else ()
                    changed |= self._delta(function, "arguments", key, ending, event, chunk, touched)
            if ending:
                self._end(lambda key, index=index: key[1] == index, touched, out)
        return chunk if changed else None

    def _delta(
        self, holder: Any, field: str, key: Key, ending: bool, event: SseEvent, payload: Any, touched: list
    ) -> bool:
        """Run the text in `holder[field]` through channel `key`; whether the text sent differs."""
        text = holder.get(field) if isinstance(holder, dict) else None
        if not isinstance(text, str):
            return False
        touched.append(key)
        released = self._advance(key, text, ending, event.name, payload)
        if released == text:
            return False
        holder[field] = released
        return True

    def _responses(self, event: SseEvent, out: list[bytes]) -> Any:
        if event.name is not None and event.name not in _RESPONSE_EVENTS:
            return None
        payload = _payload(event)
        if payload is None:
            return None
        kind = payload.get("type")
        if kind in _RESPONSE_DELTAS:
            channel = _RESPONSE_DELTAS[kind]
            key = _response_key(channel, payload.get("output_index", 0), payload.get("content_index", 0))
            text = payload.get("delta")
            if not self._delta(payload, "delta", key, False, event, payload, []):
                return None
            if not payload["delta"] and text:
                return _DROP
            if payload.get("logprobs"):
                payload["logprobs"] = []  # they describe tokens the client no longer gets
            return payload
        if kind in _RESPONSE_DONES:
            channel, field = _RESPONSE_DONES[kind]
            key = _response_key(channel, payload.get("output_index", 0), payload.get("content_index", 0))
            self._end(lambda k: k == key, (), out)
            return payload if self._replace_whole(payload, field, key) else None
        if kind == "response.content_part.done":
            item, index = payload.get("output_index", 0), payload.get("content_index", 0)
            self._end(lambda k: k[1:] == (item, index), (), out)
            return payload if self._replace_part(payload.get("part"), item, index) else None
        if kind == "response.output_item.done":
            item = payload.get("output_index", 0)
            self._end(lambda k: k[1] == item, (), out)
            return payload if self._replace_item(payload.get("item"), item) else None
        if kind in _RESPONSE_ENDS:
            self._end(lambda k: True, (), out)
            response = payload.get("response")
            output = response.get("output") if isinstance(response, dict) else None
            changed = False
            for item, entry in enumerate(output or ()):
                changed |= self._replace_item(entry, item)
            return payload if changed else None
        return None

    def _replace_item(self, entry: Any, item: int) -> bool:
        if not isinstance(entry, dict):
            return False
        changed = False
        if entry.get("type") == "function_call":
            changed = self._replace_whole(entry, "arguments", ("args", item))
        for index, part in enumerate(entry.get("content") or ()):
            changed |= self._replace_part(part, item, index)
        return changed

    def _replace_part(self, part: Any, item: int, index: int) -> bool:
        found = _PART_TEXTS.get(part.get("type")) if isinstance(part, dict) else None
        if found is None:
            return False
        channel, field = found
        return self._replace_whole(part, field, _response_key(channel, item, index))

    def _messages(self, event: SseEvent, out: list[bytes]) -> Any:
        if event.name is not None and event.name not in _MESSAGE_EVENTS:
            return None
        payload = _payload(event)
        if payload is None:
            return None
        kind = payload.get("type")
        if kind == "content_block_delta":
            delta = payload.get("delta")
            if not isinstance(delta, dict):
                return None
            field = _MESSAGE_TEXTS.get(delta.get("type"))
            if field is None:
                return None
            text = delta.get(field)
            key = ("block", payload.get("index", 0))
            if not self._delta(delta, field, key, False, event, payload, []):
                return None
            return _DROP if text and not delta[field] else payload
        if kind == "content_block_stop":
            key = ("block", payload.get("index", 0))
            self._end(lambda k: k == key, (), out)
        elif kind in ("message_delta", "message_stop"):
            self._end(lambda k: True, (), out)
        return None


def _response_key(channel: str, item: int, index: int) -> Key:
    return ("args", item) if channel == "args" else (channel, item, index)


def _payload(event: SseEvent) -> dict[str, Any] | None:
    try:
        payload = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def _frame(name: str | None, payload: dict[str, Any]) -> bytes:
    return named_frame(name.encode(), payload) if name else data_frame(payload)


def _cut_outside_redactions(hits: Sequence[Hit], cut: int) -> int:
    """`cut`, or the start of the redaction it would split or end at: a redaction goes out whole, and one
    ending right at the cut stays held so a match adjacent to it still merges into one replacement."""
    spans = sorted((hit.start, hit.end) for hit in hits if hit.action == "redact")
    start, end = -1, -1
    for span_start, span_end in spans:
        if span_start <= end:
            end = max(end, span_end)
            continue
        if start < cut <= end:
            return start
        start, end = span_start, span_end
    return start if start < cut <= end else cut
