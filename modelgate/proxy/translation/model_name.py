"""The gateway's model name in answers relayed as the provider wrote them: tenants see the model they asked
for, never the row's upstream name (nor the dated snapshot a provider answers with).

The rewrite is a byte splice of one JSON string, not a decode and re-encode: the answer's own `model` (see
`answer_fields`) of a JSON answer, or of each SSE event as the stream passes; only an unfinished last line
of a chunk waits for the rest of itself.
"""

from __future__ import annotations

import orjson

from modelgate.proxy.translation.answer_fields import answer_field, event_documents, string_field

_MODEL = string_field("model")
_MODEL_KEY = b'"model"'
_DATA = b"data:"
_NEWLINE = 10
_SPACE = 32
_BRACE = 123


def with_model_name(body: bytes, name: bytes) -> bytes:
    """A whole JSON answer with its model named `name` (a JSON string, quotes included)."""
    match = answer_field(body, _MODEL)
    if match is None or match.group(1) == name:
        return body
    return body[: match.start(1)] + name + body[match.end(1) :]


class ModelNameStream:
    """Rewrites the model of each `data:` line of an SSE stream as it passes.

    OpenAI chat streams name the model in every chunk, each line starting alike (`data: {"id": ...,
    "model": ...`). Once a line's model has been found by the rules, the line's start up to the model's value
    (the head) is remembered: a later chunk whose every `"model"` is in a line starting with that head is
    renamed by one bytes.replace, with no walk. A chunk whose every `"model"` is followed by `:` and the
    client's name (a row that names the model as the client does) is passed on after two counts.
    """

    __slots__ = ("_carry", "_head", "_line_head", "_name", "_named", "_renamed_head")

    def __init__(self, model: str) -> None:
        # A copy: orjson's result keeps its 4 KiB output buffer, for as long as the stream stays open.
        self._name = bytes(memoryview(orjson.dumps(model)))
        self._named = _MODEL_KEY + b":" + self._name
        self._carry = b""
        self._head = self._line_head = self._renamed_head = b""

    def feed(self, chunk: bytes) -> bytes:
        """Every complete line of `chunk` (and of what came before), the model renamed where one is named."""
        carry = self._carry
        data = carry + chunk if carry else chunk
        end = data.rfind(b"\n") + 1
        if end < len(data):
            self._carry, data = data[end:], data[:end]
            if not data:
                return b""
        elif carry:
            self._carry = b""
        # _rewrite's first steps, inline: most chunks end here, without a further call.
        models = data.count(_MODEL_KEY)
        if not models:
            return data
        if self._renamed_head is self._head and data.count(self._named) == models:
            return data
        return self._rewrite(data, models)

    def finish(self) -> bytes:
        """An unfinished last line the stream ended with, rewritten too."""
        tail, self._carry = self._carry, b""
        models = tail.count(_MODEL_KEY)
        return self._rewrite(tail, models) if models else tail

    def _rewrite(self, data: bytes, models: int) -> bytes:
        """`data` (whole lines, `models` model keys in them) with each line's model renamed: lines that
        start with the remembered head by one replace, the others one by one, each teaching the head; any
        other shape by the full walk. Its caller has passed on a chunk whose every model key names the
        client's model already (two counts, each a pass in C; the walk costs several times more)."""
        find = data.find
        name = self._name
        pieces: list[bytes] = []
        done = start = 0  # data[:done] is in pieces already; lines from `start` on are still to look at
        position = find(_MODEL_KEY)
        while position >= 0:
            head = self._head
            if head and data.count(self._line_head, start) + data.startswith(head, start) == (
                data.count(_MODEL_KEY, start) if start else models
            ):
                if self._renamed_head is not head:
                    pieces.append(data[done:start])
                    pieces.append(data[start:].replace(head, self._renamed_head))
                    done = len(data)
                break
            line_start = data.rfind(b"\n", 0, position) + 1
            json_start = line_start + 5
            if data[json_start] == _SPACE:
                json_start += 1
            match = _MODEL.match(data, position)
            if (
                match is None
                or not data.startswith(_DATA, line_start)
                or data[json_start] != _BRACE
                or data.count(b"{", json_start, position) != 1
                or find(b"[", json_start, position) >= 0
            ):
                return self._rewrite_each(data)  # not the usual shape: every event by the rules
            value = match.group(1)
            if value != name:
                pieces.append(data[done : match.start(1)])
                pieces.append(name)
                done = match.end(1)
            self._learn(data[line_start : match.end(1)], value)
            start = find(b"\n", match.end()) + 1
            if not start:
                break
            position = find(_MODEL_KEY, start)
        if not pieces:
            return data
        if done < len(data):
            pieces.append(data[done:])
        return b"".join(pieces)

    def _learn(self, head: bytes, value: bytes) -> None:
        if head != self._head:
            self._head, self._line_head = head, b"\n" + head
            self._renamed_head = head if value == self._name else head[: -len(value)] + self._name

    def _rewrite_each(self, data: bytes) -> bytes:
        """The model of each event found by the answer-field rules (Anthropic, Responses, odd shapes)."""
        name = self._name
        pieces: list[bytes] = []
        done = 0  # data[:done] is in pieces already
        for start, end in event_documents(data):
            match = answer_field(data, _MODEL, start, end)
            if match is not None and match.group(1) != name:
                pieces.append(data[done : match.start(1)])
                pieces.append(name)
                done = match.end(1)
        if not pieces:
            return data
        pieces.append(data[done:])
        return b"".join(pieces)
