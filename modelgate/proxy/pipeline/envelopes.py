"""Rendering of gateway errors into envelope A (OpenAI style) or envelope B (Anthropic style).

The only place that turns a GatewayError into bytes; which envelope a request gets is decided once, when
its route is matched (see `proxy.pipeline.route_table`), and stored on the request context.
"""

from __future__ import annotations

from enum import Enum

import orjson
from aiohttp import web

from modelgate.domain.errors import GatewayError


class Envelope(Enum):
    """The two error body shapes of the model API."""

    A = "A"
    B = "B"


def envelope_a_body(error: GatewayError) -> dict:
    """`{error: {message, type, code?}}`: code present only when the spec's table names one."""
    body: dict = {"message": error.message, "type": error.type_a}
    if error.code is not None:
        body["code"] = error.code
    return {"error": body}


def envelope_b_body(error: GatewayError) -> dict:
    """`{type: "error", error: {type, message}}`."""
    return {"type": "error", "error": {"type": error.type_b, "message": error.message}}


def stamp_request_id(headers: dict[str, str], request_id: str, envelope: Envelope) -> None:
    """`x-request-id` on every answer; in envelope B also `request-id`, the name the anthropic SDK reads."""
    headers["x-request-id"] = request_id
    if envelope is Envelope.B:
        headers["request-id"] = request_id


def render_error(error: GatewayError, envelope: Envelope, request_id: str | None = None) -> web.Response:
    """The HTTP response for an error, in the envelope this request is owed."""
    use_b = envelope is Envelope.B and not error.always_envelope_a
    body = envelope_b_body(error) if use_b else envelope_a_body(error)
    headers = dict(error.headers)
    if request_id:
        stamp_request_id(headers, request_id, envelope)
    return web.Response(
        status=error.status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )
