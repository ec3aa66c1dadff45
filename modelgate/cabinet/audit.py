"""The audit log: who did what to which object, newest first, read in stable pages, optionally filtered
(stored by `modelgate/domain/audit_log.py`)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.requests import bad_request, json_response
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.audit_log import Actor, AuditEntry, AuditFilter, newest_entries

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
# Query parameter -> AuditFilter field. Values are event names, ids and route names: short and printable.
FILTER_PARAMETERS = {
    "event": "event",
    "ruleId": "target_id",
    "keyId": "key_id",
    "systemId": "system_id",
    "route": "route",
}
MAX_FILTER_LENGTH = 200
# What `new_id` makes: the id half of a cursor is nothing else.
_ENTRY_ID = re.compile(r"^[a-z]{1,16}_[0-9a-f]{8,64}$")


def actor_of(principal: Principal) -> Actor:
    """The actor recorded for an authenticated caller."""
    if principal.kind == "management_key":
        return Actor("management_key", principal.key_id, None)
    return Actor("user", principal.user_id, principal.email)


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """The audit entry object of the API."""
    actor = entry.actor
    return {
        "id": entry.id,
        "event": entry.event,
        "actor": {"type": actor.type, "id": actor.id, "email": actor.email},
        "targetId": entry.target_id,
        "keyId": entry.key_id,
        "systemId": entry.system_id,
        "route": entry.route,
        "details": entry.details,
        "createdAt": isoformat(entry.created_at),
    }


def encode_cursor(entry: AuditEntry) -> str:
    """An opaque position after `entry` in newest-first order; repr keeps the float exact."""
    return base64.urlsafe_b64encode(f"{entry.created_at!r}|{entry.id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (created_at, id) a cursor points after; 400 when it was not made by `encode_cursor`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, entry_id = raw.partition("|")
        position = float(at)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise bad_request("cursor is not valid") from exc
    # A cursor is the client's text, decoded: a NUL in it would reach the query (a 500 on PostgreSQL).
    if not _ENTRY_ID.match(entry_id) or position != position:  # NaN never orders
        raise bad_request("cursor is not valid")
    return position, entry_id


def _page_size(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_PAGE_SIZE
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise bad_request(f"limit must be an integer from 1 to {MAX_PAGE_SIZE}")
    return int(raw)


def _filters(query: Mapping[str, str]) -> AuditFilter:
    """The filters of the query; an empty value filters nothing, like an empty limit or cursor."""
    given: dict[str, str] = {}
    for parameter, field in FILTER_PARAMETERS.items():
        value = query.get(parameter)
        if not value:
            continue
        if len(value) > MAX_FILTER_LENGTH or not value.isprintable():
            raise bad_request(f"{parameter} must be at most {MAX_FILTER_LENGTH} printable characters")
        given[field] = value
    return AuditFilter(**given)


async def audit_log_handler(request: web.Request) -> web.Response:
    """GET /audit-log?limit=&cursor=&event=&ruleId=&keyId=&systemId=&route=: the organization's audit
    entries, newest first, those matching every filter given (owner/admin)."""
    principal = await authenticate(request, roles=ADMIN_ROLES)
    limit = _page_size(request.query.get("limit"))
    filters = _filters(request.query)
    cursor = request.query.get("cursor")
    after = decode_cursor(cursor) if cursor else None
    # One entry more than the page tells whether a next page exists; the cursor is a position, so it pages
    # on with the same filters.
    db = services_of(request).db
    found = await newest_entries(db, principal.organization_id, limit + 1, after, filters)
    entries = found[:limit]
    next_cursor = encode_cursor(entries[-1]) if len(found) > limit else None
    return json_response({"entries": [entry_json(e) for e in entries], "nextCursor": next_cursor})
