"""Request URLs whose text cannot be stored or looked up: a NUL character, or bytes that are not UTF-8.

PostgreSQL text holds no NUL (a lookup with one fails instead of finding nothing), and percent-escapes
of invalid UTF-8 are either left undecoded or replaced, so an id or a query value built from them is not
what the client sent. Both are refused at the edge with 400, before any handler or plugin sees them.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes


def url_text_problem(raw: str) -> str | None:
    """Why a raw request target, or its query (still percent-encoded), cannot be read as text, or None."""
    if "%" not in raw and raw.isascii():
        return None  # nothing escaped: the HTTP parser already refused NUL and control bytes
    try:
        target = unquote_to_bytes(raw)
        target.decode("utf-8")
    except UnicodeError:  # undecodable escapes, or raw non-UTF-8 bytes the parser let through
        return "the request URL is not valid UTF-8"
    if b"\x00" in target:
        return "the request URL contains a NUL character"
    return None
