"""The gateway's model name in answers relayed as the provider wrote them: tenants see the model they asked
for, never the row's upstream name (nor the dated snapshot a provider answers with).

The rewrite is a byte splice of one JSON string, not a decode and re-encode: the answer's own `model` (see
`answer_fields`) of a JSON answer, or of each SSE event as the stream passes; only an unfinished last line
of a chunk waits for the rest of itself.
"""

from __future__ import annotations

import orjson

from proxy.translation.answer_fields import answer_field, event_documents, string_field

_MODEL = string_field("model")
_MODEL_KEY = b'"model"'


def with_model_name(body: bytes, name: bytes) -> bytes:
    """A whole JSON answer with its model named `name` (a JSON string, quotes included)."""
    match = answer_field(body, _MODEL)
    if match is None or match.group(1) == name:
        return body
    return body[: match.start(1)] + name + body[match.end(1) :]


class ModelNameStream:
    """Rewrites the model of each `data:` line of an SSE stream as it passes."""

    __slots__ = ("_carry", "_name")

    def __init__(self, model: str) -> None:
        self._name = orjson.dumps(model)
        self._carry = b""

    def feed(self, chunk: bytes) -> bytes:
        """Every complete line of `chunk` (and of what came before), the model renamed where one is named."""
        data = self._carry + chunk if self._carry else chunk
        end = data.rfind(b"\n") + 1
        if end < len(data):
            self._carry, data = data[end:], data[:end]
            if not data:
                return b""
        else:
            self._carry = b""
        return self._rewrite(data) if _MODEL_KEY in data else data

    def finish(self) -> bytes:
        """An unfinished last line the stream ended with, rewritten too."""
        tail, self._carry = self._carry, b""
        return self._rewrite(tail) if _MODEL_KEY in tail else tail

    def _rewrite(self, data: bytes) -> bytes:
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
