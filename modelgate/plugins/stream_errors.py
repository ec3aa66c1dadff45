"""Stream errors: a stream the provider broke off after its first bytes reached the client cannot fail over
nor change its status; it ends with an error event the client's SDK parses, in the route's format
(an OpenAI-style `data:` error object, or Anthropic's `event: error`), saying the model is unavailable.
"""

from __future__ import annotations

import orjson

from modelgate.domain.errors import GatewayError, InternalError, UpstreamUnavailable
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.envelopes import Envelope, envelope_a_body, envelope_b_body


class StreamErrors(Plugin):
    """Ends a broken stream with an error event in the route's format."""

    name = "stream_errors"
    essential = True
    requires = frozenset({"envelope", "outcome"})

    def on_stream_error(self, ctx: RequestContext, error: BaseException) -> bytes:
        # A step of ours that failed mid-relay is the gateway's error, not the model's.
        return stream_error_event(ctx.envelope, InternalError() if ctx.outcome == "internal_error" else None)


def stream_error_event(envelope: Envelope, error: GatewayError | None = None) -> bytes:
    """The event that ends a stream in `envelope`'s format: a broken one (the model is unavailable) unless
    another `error` ends it."""
    error = error or UpstreamUnavailable()
    if envelope is Envelope.B:
        return b"event: error\ndata: " + orjson.dumps(envelope_b_body(error)) + b"\n\n"
    return b"data: " + orjson.dumps(envelope_a_body(error)) + b"\n\n"
