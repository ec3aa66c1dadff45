"""What the cabinet's listing handlers (usage, the audit log, the request log) read from a query alike: a UTC
day (`from`, `to`) within the dates the ledger can hold, and an opaque newest-first cursor over (time, id)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from datetime import date

from modelgate.cabinet.requests import bad_request

# The ledger starts after the epoch; the upper bound keeps date arithmetic clear of `date.max`.
FIRST_DAY = date(1970, 1, 1)
LAST_DAY = date(9998, 12, 31)
DAY = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
# What `new_id` makes: the id half of a cursor is nothing else.
ROW_ID = re.compile(r"^[a-z]{1,16}_[0-9a-f]{8,64}$")


def query_day(query: Mapping[str, str], name: str) -> date | None:
    """The day `YYYY-MM-DD` in query parameter `name` (None when absent or empty); 400 otherwise."""
    raw = query.get(name)
    if not raw:
        return None
    try:
        if not DAY.match(raw):
            raise ValueError(raw)
        day = date.fromisoformat(raw)
    except ValueError as exc:
        raise bad_request(f"{name} must be a date YYYY-MM-DD") from exc
    if not FIRST_DAY <= day <= LAST_DAY:
        raise bad_request(f"{name} must be between {FIRST_DAY} and {LAST_DAY}")
    return day


def encode_cursor(created_at: float, row_id: str) -> str:
    """An opaque position after (created_at, row_id) in newest-first order; repr keeps the float exact."""
    return base64.urlsafe_b64encode(f"{created_at!r}|{row_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (created_at, id) a cursor points after; 400 when it was not made by `encode_cursor`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, row_id = raw.partition("|")
        position = float(at)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise bad_request("cursor is not valid") from exc
    # A cursor is the client's text, decoded: a NUL in it would reach the query (a 500 on PostgreSQL).
    if not ROW_ID.match(row_id) or position != position:  # NaN never orders
        raise bad_request("cursor is not valid")
    return position, row_id
