"""The audit log: who did what to which object, newest first, read in stable pages."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.requests import bad_request, json_response, refuse_unstorable_query
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor, Row

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200


@dataclass(frozen=True, slots=True)
class Actor:
    """Who performed an audited action: a user, a management key, or nobody known (`anonymous`)."""

    type: str
    id: str | None
    email: str | None


def actor_of(principal: Principal) -> Actor:
    """The actor recorded for an authenticated caller."""
    if principal.kind == "management_key":
        return Actor("management_key", principal.key_id, None)
    return Actor("user", principal.user_id, principal.email)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One recorded event."""

    id: str
    event: str
    actor: Actor
    target_id: str | None
    details: dict[str, Any]
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The audit entry object of the API."""
        return {
            "id": self.id,
            "event": self.event,
            "actor": {"type": self.actor.type, "id": self.actor.id, "email": self.actor.email},
            "targetId": self.target_id,
            "details": self.details,
            "createdAt": isoformat(self.created_at),
        }


async def record(
    ex: Executor,
    organization_id: str,
    event: str,
    actor: Actor,
    at: float,
    *,
    target_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append an entry; call it with the transaction of the action so both commit or neither does."""
    await ex.execute(
        "INSERT INTO audit_log (id, organization_id, event, actor_type, actor_id, actor_email, target_id,"
        " details, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        new_id("aud"),
        organization_id,
        event,
        actor.type,
        actor.id,
        actor.email,
        target_id,
        orjson.dumps(details or {}).decode(),
        at,
    )


def _entry(row: Row) -> AuditEntry:
    return AuditEntry(
        id=row["id"],
        event=row["event"],
        actor=Actor(row["actor_type"], row["actor_id"], row["actor_email"]),
        target_id=row["target_id"],
        details=orjson.loads(row["details"]),
        created_at=row["created_at"],
    )


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
    columns = "id, event, actor_type, actor_id, actor_email, target_id, details, created_at"
    if after is None:
        rows = await ex.fetch(
            f"SELECT {columns} FROM audit_log WHERE organization_id = $1"
            " ORDER BY created_at DESC, id DESC LIMIT $2",
            organization_id,
            limit + 1,
        )
    else:
        rows = await ex.fetch(
            f"SELECT {columns} FROM audit_log WHERE organization_id = $1"
            " AND (created_at < $2 OR (created_at = $2 AND id < $3))"
            " ORDER BY created_at DESC, id DESC LIMIT $4",
            organization_id,
            after[0],
            after[1],
            limit + 1,
        )
    entries = [_entry(r) for r in rows[:limit]]
    next_cursor = encode_cursor(entries[-1]) if len(rows) > limit else None
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
