"""Finding a field of the answer itself (its `model`, its `id`) in JSON answers and SSE events, byte-level.

An answer's own field is the first `"name": "..."` key at the top level of the JSON document, or one level
down inside a top-level `message` (Anthropic `message_start`) or `response` (Responses events) object. A key
is told from look-alike text by the JSON before it: inside a JSON string every quote is escaped, so a real
`"name":` is always a key, and the containers open around it are counted with strings skipped. No document
is decoded, so a stream chunk costs a regex search and, where a key is found, a look at the bytes before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]]')
# Top-level keys whose object holds the answer's own fields in stream events.
_HOLDERS = (b'"message"', b'"response"')
_OPEN = frozenset(b"{[")
_QUOTE = 34
_SPACE = 32
_NEWLINE = 10
_BRACE = 123


def string_field(name: str) -> re.Pattern[bytes]:
    """The pattern of a key `name` with a JSON string value (group 1: the string token, quotes included)."""
    return re.compile(rb'"' + re.escape(name.encode()) + rb'"\s*:\s*("[^"\\\n]*(?:\\.[^"\\\n]*)*")')


def _of_the_answer(json_prefix: bytes) -> bool:
    """Whether a key right after `json_prefix` (the JSON from its opening brace up to the key) is a field of
    the answer: at the top level, or directly inside a top-level `message` / `response` object."""
    if json_prefix.count(b"{") == 1 and b"[" not in json_prefix:
        return True  # no container opened after the top-level object's own brace: the key is top level
    open_keys: list[bytes] = []  # for each open container, the key it is the value of (b"" if none)
    last_string = b""
    for match in _STRING_OR_BRACKET.finditer(json_prefix):
        token = match.group()
        first = token[0]
        if first == _QUOTE:
            last_string = token
        elif first in _OPEN:
            open_keys.append(last_string)
            last_string = b""
        elif open_keys:
            open_keys.pop()
    return len(open_keys) == 1 or (len(open_keys) == 2 and open_keys[1] in _HOLDERS)


def answer_field(
    data: bytes, field: re.Pattern[bytes], start: int = 0, end: int = -1
) -> re.Match[bytes] | None:
    """The answer's own `field` in the one JSON document at data[start:end] (from its first brace)."""
    if end < 0:
        end = len(data)
    json_start = data.find(b"{", start, end)
    if json_start < 0:
        return None
    position = json_start
    while True:
        match = field.search(data, position, end)
        if match is None:
            return None
        if _of_the_answer(data[json_start : match.start()]):
            return match
        position = match.end()


def event_documents(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of the JSON object on each `data:` line of complete SSE lines."""
    find = data.find
    position = 0
    while True:
        line_start = find(b"data:", position)
        if line_start < 0:
            return
        line_end = find(b"\n", line_start)
        if line_end < 0:
            line_end = len(data)
        position = line_end + 1
        if line_start and data[line_start - 1] != _NEWLINE:
            continue  # "data:" inside a line, not a field
        json_start = line_start + 5
        if json_start < line_end and data[json_start] == _SPACE:
            json_start += 1
        if json_start < line_end and data[json_start] == _BRACE:
            yield json_start, line_end
