"""JSON answers and the two vendors' error envelopes, rendered in one place."""

from __future__ import annotations

from enum import Enum
from typing import Any

import orjson
from aiohttp import web


class Vendor(Enum):
    """Which real API a request speaks, deciding auth headers and error shape."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class UpstreamError(Exception):
    """An error a route answers with; rendered in the vendor's envelope by the middleware."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


# Real OpenAI error `type` (and `code`) per status.
_OPENAI_TYPES: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    429: ("requests", "rate_limit_exceeded"),
}
_ANTHROPIC_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(payload), status=status, headers=headers, content_type="application/json"
    )


def error_body(
    vendor: Vendor, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The error JSON the real vendor would send for `status`."""
    if vendor is Vendor.ANTHROPIC:
        kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    fallback = ("server_error" if status >= 500 else "invalid_request_error", None)
    kind, default_code = _OPENAI_TYPES.get(status, fallback)
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}


def error_response(vendor: Vendor, error: UpstreamError) -> web.Response:
    body = error_body(vendor, error.status, error.message, param=error.param, code=error.code)
    return json_response(body, error.status)
