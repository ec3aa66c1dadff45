"""Usage metering: token usage is read from the upstream answer as it passes, and every request writes a
ledger row (organization, key, system, model, row, tokens by kind, cost, request id, status, time).

For OpenAI-style streams whose client did not ask for usage, the gateway asks the upstream for it
(`stream_options.include_usage`) and keeps that usage from the client, whatever the chunk carrying it looks
like; a provider's own price (`cost`) never reaches a client.
"""

from __future__ import annotations

import re
from functools import partial

import orjson

from modelgate.domain.counters import Counters
from modelgate.domain.ledger import CRASHED, LedgerEntry, LedgerWriter
from modelgate.domain.media import MEDIA_ROUTES, MediaUsageReader
from modelgate.domain.usage import (
    StreamUsageScanner,
    Usage,
    complete_events_end,
    generated_tokens,
    tokens_of,
    usage_of_body,
)
from modelgate.plugins.billing_gate import final_cost
from modelgate.proxy.chain import Plugin
from modelgate.proxy.context import RequestContext, entry_for

_USAGE_ROUTES = frozenset({"chat_completions", "completions"})
# Routes whose OpenAI-style answers some providers price (`cost`); the price is theirs, never relayed.
_PRICED_ROUTES = frozenset({"chat_completions", "completions", "embeddings"})


class ProviderPriceFilter:
    """Keeps a provider's own price (`cost`, `cost_details`, top level or in `usage`) from the client of a
    whole OpenAI-style answer. Stateless, so one serves every request; streams pass through it unchanged."""

    __slots__ = ()

    def whole(self, body: bytes) -> bytes:
        """A complete (non-streamed) answer without the provider's price."""
        if _PRICE.search(body) is None:
            return body
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
        if not isinstance(document, dict) or not _unpriced(document):
            return body
        return orjson.dumps(document)

    def feed(self, chunk: bytes) -> bytes:
        return chunk

    def finish(self) -> bytes:
        return b""


class UsageChunkFilter(ProviderPriceFilter):
    """For one OpenAI-style stream, keeps from the client what it did not ask for: the usage the gateway
    asked the provider for on its behalf (`strip_usage`), and the provider's price. An event that then
    carries nothing is dropped; one that also carries content keeps it.

    Only events with a usage object or a price key are decoded (about one a stream); every other event
    passes as it came, after one regex search.
    """

    __slots__ = ("_carry", "_strip_usage")

    def __init__(self, strip_usage: bool) -> None:
        self._carry = b""
        self._strip_usage = strip_usage

    def feed(self, chunk: bytes) -> bytes:
        carry = self._carry
        data = carry + chunk if carry else chunk
        if data.endswith(b"\n\n"):  # the usual chunk ends its last event: passed on whole, uncopied
            complete = data
            if carry:
                self._carry = b""
        else:
            # Events end with a blank line: LF LF, or CR LF CR LF from providers that end lines with CR LF.
            end = complete_events_end(data)
            if not end:
                self._carry = data
                return b""
            complete, self._carry = data[:end], data[end:]
        withheld = _WITHHELD if self._strip_usage else _PRICE
        match = withheld.search(complete)
        if match is None:
            return complete
        # Only the events holding a match are rebuilt; the bytes between them pass as they came.
        out: list[bytes] = []
        done = 0  # complete[:done] is decided
        while match is not None:
            start = _event_start(complete, done, match.start())
            blank = _EVENT_END.search(complete, match.end())  # complete ends with a blank line
            event = self._event(complete[start : blank.start()], withheld)
            out.append(complete[done:start])
            if event:  # else nothing is left: the blank line goes too
                out.append(event)
                out.append(blank.group())
            done = blank.end()
            match = withheld.search(complete, done)
        out.append(complete[done:])
        return b"".join(out)

    def finish(self) -> bytes:
        tail, self._carry = self._carry, b""
        return tail

    def _event(self, event: bytes, withheld: re.Pattern[bytes]) -> bytes:
        """The event without what is withheld (b"" when nothing is left), its blank line not included."""
        lines = event.split(b"\n")
        for index, line in enumerate(lines):
            if not line.startswith(b"data:") or withheld.search(line) is None:
                continue
            try:
                document = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            if not isinstance(document, dict):
                continue
            changed = _unpriced(document)
            if self._strip_usage and document.get("usage") is not None:
                del document["usage"]
                changed = True
                if not any(_carries_something(choice) for choice in document.get("choices") or ()):
                    return b""  # the usage chunk the client did not ask for, and nothing else
            if changed:
                lines[index] = b"data: " + orjson.dumps(document) + (b"\r" if line.endswith(b"\r") else b"")
        return b"\n".join(lines)


_EVENT_END = re.compile(rb"(\n\r?\n)")
# A key, not text: inside a JSON string every quote is escaped.
_PRICE = re.compile(rb'"cost(?:_details)?"\s*:')
_WITHHELD = re.compile(rb'"(?:usage"\s*:\s*\{|cost(?:_details)?"\s*:)')  # one leading quote: a faster search
_PRICE_KEYS = ("cost", "cost_details")
# Keys of a chunk's choice that say which choice it is, not what it carries.
_CHOICE_PLACE = frozenset({"index"})
WHOLE_ANSWER_FILTER = ProviderPriceFilter()


def _event_start(data: bytes, start: int, position: int) -> int:
    """Where the event holding `position` starts: after the last blank line in data[start:position]."""
    lf, crlf = data.rfind(b"\n\n", start, position), data.rfind(b"\n\r\n", start, position)
    return max(start, lf + 2 if lf >= 0 else 0, crlf + 3 if crlf >= 0 else 0)


def _unpriced(document: dict) -> bool:
    """Removes the provider's price (top level and in `usage`); True if there was one."""
    removed = False
    usage = document.get("usage")
    for holder in (document, usage) if isinstance(usage, dict) else (document,):
        for key in _PRICE_KEYS:
            if key in holder:
                del holder[key]
                removed = True
    return removed


def _carries_something(choice: object) -> bool:
    """Whether a streamed choice has anything for the client: text, a delta, a finish reason, logprobs."""
    if not isinstance(choice, dict):
        return True
    return any(_non_empty(value) for key, value in choice.items() if key not in _CHOICE_PLACE)


def _non_empty(value: object) -> bool:
    if isinstance(value, dict):
        return any(_non_empty(item) for item in value.values())
    return value is not None and value != "" and value != []


class UsageMetering(Plugin):
    """Reads usage from answers and records every request in the ledger."""

    name = "usage_metering"
    requires = frozenset({"route", "key", "model", "stream", "payload", "body"})
    provides = frozenset({"ledger_row_id", "usage_scanner", "chunk_filter", "usage"})

    def __init__(self, ledger: LedgerWriter, counters: Counters) -> None:
        self._ledger = ledger
        self._counters = counters

    def on_request(self, ctx: RequestContext) -> None:
        if ctx.model is None:
            return
        if ctx.reserved_micros is not None:  # admitted by the billing gate (the step before this one)
            ctx.ledger_row_id = self._ledger.admit(_crash_entry(ctx))
        route = ctx.route.name
        if route in MEDIA_ROUTES:
            # Media answers are charged per unit (image, second) or per request, never by bytes seen.
            ctx.usage_scanner = MediaUsageReader(route, ctx.payload)
            return
        if ctx.stream:
            ctx.usage_scanner = StreamUsageScanner(route)
            payload = ctx.payload
            if route in _USAGE_ROUTES:
                options = payload.get("stream_options")
                asked = isinstance(options, dict) and options.get("include_usage") is True
                if not asked:
                    payload["stream_options"] = {
                        **(options if isinstance(options, dict) else {}),
                        "include_usage": True,
                    }
                    ctx.payload_changed = True
                ctx.chunk_filter = UsageChunkFilter(strip_usage=not asked)
        elif route in _PRICED_ROUTES:
            ctx.chunk_filter = WHOLE_ANSWER_FILTER

    def on_chunk(self, ctx: RequestContext, chunk: bytes) -> None:
        scanner = ctx.usage_scanner
        if scanner is not None:
            scanner.feed(chunk)
            if scanner.usage is not None:
                ctx.usage = scanner.usage
        elif ctx.model is not None and ctx.status == 200:
            ctx.usage = usage_of_body(chunk)
            if ctx.usage is None:  # charged by the text it carries
                ctx.content_tokens = tokens_of(*generated_tokens(chunk))

    def on_complete(self, ctx: RequestContext) -> None:
        if ctx.model is None or ctx.key is None:  # refused before a model was known: nothing was used
            return
        if ctx.route.name == "realtime" and ctx.status == 101:  # one row per response, written by the relay
            return
        cost = final_cost(ctx)
        status = ctx.answered_status or ctx.status
        row_key = ctx.row.key if ctx.row else None
        entry = entry_for(
            ctx, ctx.usage, cost, status, _outcome(ctx), row_key=row_key, row_id=ctx.ledger_row_id
        )
        if ctx.reservations:
            # Spooled once its settlement is in the live counter (a crash in between is recovered by row id).
            self._counters.after_written(partial(self._ledger.add, entry))
        else:
            self._ledger.add(entry)


def _crash_entry(ctx: RequestContext) -> LedgerEntry:
    """The row of an admitted request whose process dies before it completes: the prompt, which the
    provider surely billed (about 4 bytes a token), at most the reservation."""
    usage = Usage(input_tokens=len(ctx.body) // 4)
    return entry_for(ctx, usage, min(ctx.model.prices.cost(usage), ctx.reserved_micros), 0, CRASHED)


def _outcome(ctx: RequestContext) -> str:
    """How the request ended, for its ledger row."""
    if ctx.answered_status:
        return ctx.outcome
    # Answered by the gateway itself (a realtime secret, a video list): complete, and free.
    return "completed" if 0 < ctx.status < 400 else "refused"
