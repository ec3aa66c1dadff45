"""The translator interface the forwarder calls; stateless translators, one stateful stream per request."""

from __future__ import annotations

from typing import Protocol


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
