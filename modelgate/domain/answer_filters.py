"""Filters on the bytes of an answer: a provider's own price (`cost`, `cost_details`) taken out of
OpenAI-style answers, and, from a stream, the usage the gateway asked for on the client's behalf
(plugins.usage_filter decides which filter an answer gets).

Streams are filtered event by event as they pass: only events holding a usage object or a price key are
decoded (about one a stream); an incomplete event is held back until it completes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import orjson

from modelgate.domain.usage import StreamUsageScanner, complete_events_end, usage_objects_at


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
    passes as it came, after counts and a substring search (`_withheld`).
    """

    __slots__ = ("_carry", "_scanner", "_strip_usage")

    def __init__(self, strip_usage: bool, scanner: StreamUsageScanner | None = None) -> None:
        self._carry = b""
        self._strip_usage = strip_usage
        self._scanner = scanner  # the stream's metering scanner, whose last search may be this chunk's

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
        # What is withheld, in order: each usage object (when stripped) and price key. The searches that pass
        # most chunks are a count and a substring search in C, not a regex scan; the usual chunk's usage
        # objects are the metering's finds, fed the very same bytes just before.
        found: Sequence[tuple[int, int]] = ()
        if self._strip_usage:
            searched = self._scanner.searched if self._scanner is not None else None
            if searched is not None and searched[0] is complete and searched[1] == len(complete):
                found = searched[2]
            else:
                found = usage_objects_at(complete, len(complete))
        # find, not `in`: bytes' `in` first tries its operand as an int, and clears the error it raises.
        if complete.find(_COST) >= 0:
            found = sorted([*found, *(match.span() for match in _PRICE.finditer(complete))])
        if not found:
            return complete
        # Only the events holding a match are rebuilt; the bytes between them pass as they came.
        out: list[bytes] = []
        done = 0  # complete[:done] is decided
        for match_start, match_end in found:
            if match_start < done:
                continue  # in an event already rebuilt
            start = _event_start(complete, done, match_start)
            blank = _EVENT_END.search(complete, match_end)
            if blank is None:  # never: complete ends with a blank line
                break
            event = self._event(complete[start : blank.start()])
            out.append(complete[done:start])
            if event:  # else nothing is left: the blank line goes too
                out.append(event)
                out.append(blank.group())
            done = blank.end()
        out.append(complete[done:])
        return b"".join(out)

    def finish(self) -> bytes:
        tail, self._carry = self._carry, b""
        return tail

    def _event(self, event: bytes) -> bytes:
        """The event without what is withheld (b"" when nothing is left), its blank line not included."""
        if b"\n" not in event:  # one line, the usual event: it holds what was found
            lines = [event]
            withheld = None
        else:
            lines = event.split(b"\n")
            withheld = _WITHHELD if self._strip_usage else _PRICE
        for index, line in enumerate(lines):
            if not line.startswith(b"data:") or (withheld is not None and withheld.search(line) is None):
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
                choices = document.get("choices") or ()
                if not isinstance(choices, list | tuple):
                    choices = (choices,)  # not a list: relayed as the provider wrote it, for the client
                if not choices or not any(_carries_something(choice) for choice in choices):
                    return b""  # the usage chunk the client did not ask for, and nothing else
            if changed:
                lines[index] = b"data: " + orjson.dumps(document) + (b"\r" if line.endswith(b"\r") else b"")
        return b"\n".join(lines)


_EVENT_END = re.compile(rb"(\n\r?\n)")
# A key, not text: inside a JSON string every quote is escaped.
_PRICE = re.compile(rb'"cost(?:_details)?"\s*:')
_COST = b'"cost'
# Which line of an event of several lines holds what is withheld:
_WITHHELD = re.compile(rb'"(?:usage"\s*:\s*\{|cost(?:_details)?"\s*:)')
_PRICE_KEYS = ("cost", "cost_details")
# Keys of a chunk's choice that say which choice it is, not what it carries.
_CHOICE_PLACE = frozenset({"index"})
WHOLE_ANSWER_FILTER = ProviderPriceFilter()


def _event_start(data: bytes, start: int, position: int) -> int:
    """Where the event holding `position` starts: after the last blank line in data[start:position]."""
    return complete_events_end(data, start, position) or start


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
