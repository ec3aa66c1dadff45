"""Reading cabinet requests: the bounded JSON body, typed fields, path ids, and the one error type.

Every failure is a `CabinetError`; the app's error middleware renders it as `{"error": message}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any

import orjson
from aiohttp import web

from modelgate.cabinet.display_text import disguising_character_problem, display_text_problem, nfc
from modelgate.proxy.http.body_decoding import BodyDecodingError, request_body
from modelgate.proxy.http.url_text import url_text_problem

MAX_BODY_BYTES = 64 * 1024
MAX_NAME_LENGTH = 200
_EMAIL = re.compile(r"^[^@\s]{1,64}@(?:[^@\s.]+\.)+[^@\s.]{2,}$")
# Public ids are `kind_<hex>` (see cabinet.tokens.new_id); anything else cannot name a row.
_PUBLIC_ID = re.compile(r"^[a-z]{1,16}_[0-9a-f]{8,64}$")


class CabinetError(Exception):
    """A failure answered as `{"error": message}` with its HTTP status (and optional headers)."""

    def __init__(self, status: int, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers) if headers else {}


def bad_request(message: str) -> CabinetError:
    """400 with the given message."""
    return CabinetError(400, message)


def json_response(body: Any, status: int = 200) -> web.Response:
    """A JSON answer encoded with orjson."""
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


async def read_json_object(request: web.Request, max_bytes: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The request body as a JSON object, at most `max_bytes` decoded (64 KiB unless the endpoint says more;
    it may be compressed, like the model API's); anything else is a 4xx `CabinetError`. No string in it, key
    or value at any depth, may hold a NUL: the storage cannot keep one, and no field of the cabinet has a use
    for it."""
    content, declared = request_body(request, max_bytes, partial(_decoding_error, max_bytes))
    if declared is not None and declared > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    # Read the stream ourselves: a chunked body has no Content-Length to check up front.
    while chunk := await content.readany():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise bad_request("request body must be a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request("request body is not valid JSON") from exc
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    # JSON carries a NUL only escaped, so most bodies are not walked at all.
    if b"\\u0000" in raw:
        for key, value in body.items():
            if "\x00" in key:
                raise bad_request("request body keys must not contain NUL characters")
            if _holds_nul(value):
                raise bad_request(f"{key} must not contain NUL characters")
    return body


def _holds_nul(value: Any) -> bool:
    pending: list[Any] = [value]  # a list, not recursion: nesting depth is the client's choice
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return True
        elif isinstance(value, dict):
            pending.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def _decoding_error(max_bytes: int, error: BodyDecodingError) -> CabinetError:
    return _too_large(max_bytes) if error.status == 413 else CabinetError(error.status, error.message)


def refuse_unstorable_query(request: web.Request) -> None:
    """400 for a query holding a NUL or invalid UTF-8: a value read from it would not be what was sent,
    and a NUL cannot be stored or looked up. (Path ids need no such check: `path_id` takes only ids.)"""
    if problem := url_text_problem(request.rel_url.raw_query_string):
        raise bad_request(problem)


def _too_large(max_bytes: int) -> CabinetError:
    return CabinetError(413, f"request body is larger than {max_bytes // 1024} KiB")


def required_text(body: Mapping[str, Any], field: str, *, max_length: int = MAX_NAME_LENGTH) -> str:
    """A non-blank single-line string, stripped of surrounding whitespace."""
    value = body.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise bad_request(f"{field} is required")
    return _text(field, value, max_length)


def optional_text(body: Mapping[str, Any], field: str, *, max_length: int = MAX_NAME_LENGTH) -> str | None:
    """Like `required_text`, but absent, null or blank gives `None`."""
    value = body.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _text(field, value, max_length)


def _text(field: str, value: Any, max_length: int) -> str:
    if not isinstance(value, str):
        raise bad_request(f"{field} must be a string")
    value = nfc(value.strip())
    if len(value) > max_length:
        raise bad_request(f"{field} must be at most {max_length} characters")
    if problem := display_text_problem(field, value):
        raise bad_request(problem)
    return value


def required_secret(body: Mapping[str, Any], field: str) -> str:
    """A password or token, taken exactly as sent (whitespace is significant)."""
    value = body.get(field)
    if value is None or value == "":
        raise bad_request(f"{field} is required")
    if not isinstance(value, str):
        raise bad_request(f"{field} must be a string")
    return value


def normalize_email(value: str) -> str | None:
    """The canonical form of an e-mail address (trimmed, lower case), or None when it is not one."""
    email = nfc(value.strip().lower())
    if len(email) > 254 or display_text_problem("email", email) or not _EMAIL.match(email):
        return None
    return email


def required_email(body: Mapping[str, Any], field: str = "email") -> str:
    """A syntactically valid e-mail address, normalised."""
    value = body.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise bad_request(f"{field} is required")
    return _email(field, value)


def optional_email(body: Mapping[str, Any], field: str) -> str | None:
    """Like `required_email`, but absent, null or blank gives `None`."""
    value = body.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _email(field, value)


def _email(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise bad_request(f"{field} must be a string")
    if problem := disguising_character_problem(field, value):
        raise bad_request(problem)
    email = normalize_email(value)
    if email is None:
        raise bad_request(f"{field} must be a valid e-mail address")
    return email


def required_choice(body: Mapping[str, Any], field: str, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    value = body.get(field)
    if value is None:
        raise bad_request(f"{field} is required")
    if not isinstance(value, str):
        raise bad_request(f"{field} must be a string")
    if value not in choices:
        raise bad_request(f"{field} must be one of: {', '.join(choices)}")
    return value


def path_id(request: web.Request, name: str, *, unknown: CabinetError) -> str:
    """A public id from the URL path; a value that cannot be an id raises `unknown` (it names no row)."""
    value = request.match_info.get(name, "")
    if not _PUBLIC_ID.match(value):
        raise unknown
    return value
