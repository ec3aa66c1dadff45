"""The audit log: who did what to which object, newest first, read in stable pages (stored by
`cabinet/audit_repository.py`)."""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from modelgate.cabinet.audit_repository import Actor, AuditEntry, newest_entries
from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.requests import bad_request, json_response, refuse_unstorable_query
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.storage.database import Executor

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200


def actor_of(principal: Principal) -> Actor:
    """The actor recorded for an authenticated caller."""
    if principal.kind == "management_key":
        return Actor("management_key", principal.key_id, None)
    return Actor("user", principal.user_id, principal.email)


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
    if not entry_id or position != position:  # NaN never orders
        raise bad_request("cursor is not valid")
    return position, entry_id


async def entries_page(
    ex: Executor, organization_id: str, limit: int, after: tuple[float, str] | None
) -> tuple[list[AuditEntry], str | None]:
    """Up to `limit` entries newest first, after a cursor position; and the cursor of the next page."""
    found = await newest_entries(ex, organization_id, limit + 1, after)
    entries = found[:limit]
    next_cursor = encode_cursor(entries[-1]) if len(found) > limit else None
    return entries, next_cursor


def _page_size(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_PAGE_SIZE
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise bad_request(f"limit must be an integer from 1 to {MAX_PAGE_SIZE}")
    return int(raw)


async def audit_log_handler(request: web.Request) -> web.Response:
    """GET /audit-log?limit=&cursor=: the organization's audit entries, newest first (owner/admin)."""
    principal = await authenticate(request, roles=ADMIN_ROLES)
    refuse_unstorable_query(request)
    limit = _page_size(request.query.get("limit"))
    cursor = request.query.get("cursor")
    after = decode_cursor(cursor) if cursor else None
    entries, next_cursor = await entries_page(
        services_of(request).db, principal.organization_id, limit, after
    )
    return json_response({"entries": [e.to_json() for e in entries], "nextCursor": next_cursor})
