"""The translator interface the forwarder calls; stateless translators, one stateful stream per request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from modelgate.domain.errors import UpstreamUnavailable


class StreamTranslator(Protocol):
    """Turns upstream stream bytes into client stream bytes as they arrive (never buffers a whole stream)."""

    def feed(self, chunk: bytes) -> bytes:
        """Translated bytes ready for the client now (may be empty while an event is incomplete)."""
        ...

    def finish(self) -> bytes:
        """Whatever must close the client stream once the upstream stream has ended."""
        ...


class Translator(Protocol):
    """Request and response translation for one (route, provider kind) pair."""

    upstream_path: str

    def request_body(self, payload: dict, upstream_model: str, default_max_tokens: int) -> bytes:
        """The upstream request body for the client's payload, naming `upstream_model`.

        `default_max_tokens` (the model's config) fills in where the upstream format requires a limit.
        """
        ...

    def response_body(self, body: bytes, model: str, payload: dict) -> bytes:
        """The client's body for a complete (non-streamed) answer; `model` is the name the client used,
        `payload` the client's request (what it asked for decides how some answers read)."""
        ...

    def stream(self, model: str, payload: dict) -> StreamTranslator:
        """A fresh stream translator for one streamed answer; `model` is the name the client asked for."""
        ...


def translated_answer(body: bytes, translate: Callable[[dict[str, Any]], dict[str, Any]]) -> bytes:
    """A whole answer's JSON object translated by `translate`; an answer that is not one, or whose fields
    are not what the provider documents, is the provider's fault (UpstreamUnavailable: a 502)."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise UpstreamUnavailable("The provider answered with a body that is not JSON.") from None
    if not isinstance(answer, dict):
        raise UpstreamUnavailable("The provider answered with an unexpected body.")
    try:
        return orjson.dumps(translate(answer))
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:  # fields of other types
        raise UpstreamUnavailable(f"The provider answered with an unexpected body ({exc!r}).") from None
