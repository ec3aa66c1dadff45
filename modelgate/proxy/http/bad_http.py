"""Answers to requests that are not valid HTTP: envelope A JSON, and one log line naming no request byte.

aiohttp's parser errors quote the offending header line, request line or body bytes (an API key, a prompt) in
their message, and aiohttp logs them with a traceback and echoes them in a text/plain 400. Here only the
parser's fixed description of the fault (llhttp's reason, or a phrase per exception class) is kept.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus

import orjson
from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
)

log = logging.getLogger("modelgate.http")

# llhttp's errors read "<fixed reason>:\n\n  <the bytes>\n  <pointer>"; the reason names no request byte.
_QUOTE_SEPARATOR = ":\n\n"
# What llhttp's reasons look like ("Invalid header value char", "Data after `Connection: close`"): words,
# no digits, no long tokens. Anything else is not trusted to be free of request bytes.
_LLHTTP_REASON = re.compile(r"[A-Za-z][A-Za-z `':/-]{0,79}")
_MAX_WORD = 20
_TOO_MANY_HEADERS = "Too many headers received"
_MISSING_HOST = "Missing 'Host' header in request."
_DUPLICATE = "Duplicate '"


class MissingHttpVersion(BadStatusLine):
    """A request line with no HTTP version (an HTTP/0.9 request, or not HTTP at all)."""

    def __init__(self) -> None:
        super().__init__(error="no HTTP version in the request line")


def fault_reason(exc: BaseException) -> str:
    """A short description of what was wrong with the request, free of the request's own bytes."""
    if isinstance(exc, LineTooLong):
        return "request line or header field too long"
    if isinstance(exc, InvalidHeader):
        return "invalid header"
    if isinstance(exc, MissingHttpVersion):
        return exc.message
    message = getattr(exc, "message", "")
    if message == _TOO_MANY_HEADERS:
        return "too many header fields"
    if message == _MISSING_HOST:
        return "missing Host header"
    if isinstance(message, str) and message.startswith(_DUPLICATE):
        return "duplicate header"
    if isinstance(message, str) and _QUOTE_SEPARATOR in message:
        reason = message.split(_QUOTE_SEPARATOR, 1)[0].strip().removeprefix("Bad status line:").strip()
        if _LLHTTP_REASON.fullmatch(reason) and max(map(len, reason.split())) <= _MAX_WORD:
            return reason[0].lower() + reason[1:]
    if isinstance(exc, BadHttpMethod):
        return "invalid method"
    if isinstance(exc, BadStatusLine):
        return "invalid request line"
    if isinstance(exc, InvalidURLError):
        return "invalid request target"
    return "malformed request"


def fault_status(exc: BaseException) -> int:
    """431 for a head over the parser's limits, else 400."""
    if isinstance(exc, LineTooLong) or getattr(exc, "message", "") == _TOO_MANY_HEADERS:
        return 431
    return 400


def _fault(exc: BaseException | None, peer: str | None) -> tuple[int, bytes]:
    """The status and envelope A body for a malformed request; logs its one line."""
    if isinstance(exc, HttpProcessingError):
        reason, status = fault_reason(exc), fault_status(exc)
    else:
        reason, status = "malformed request", 400
    log.info("bad HTTP request from %s: %s", peer or "unknown peer", reason)
    body = {"error": {"message": f"malformed HTTP request: {reason}", "type": "invalid_request_error"}}
    return status, orjson.dumps(body)


def answer_bad_request(exc: BaseException | None, peer: str | None) -> web.Response:
    """The envelope A answer to a request aiohttp could not parse; the connection closes after it."""
    status, body = _fault(exc, peer)
    response = web.Response(status=status, body=body, content_type="application/json")
    response.force_close()
    return response


def raw_bad_request(exc: BaseException | None, peer: str | None, server_name: str) -> bytes:
    """The same answer as bytes for the wire, for a request whose handler already runs (its body broke)."""
    status, body = _fault(exc, peer)
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n"
        f"Server: {server_name}\r\n\r\n"
    )
    return head.encode("ascii") + body
