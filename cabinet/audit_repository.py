"""The audit log as stored: the `Actor` and `AuditEntry` records and the only SQL on `audit_log`.

Entries are appended in the transaction of the action they describe and read newest first in pages by
(created_at, id). The handler and its cursors are in `cabinet/audit.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from modelgate.cabinet.clock import isoformat
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor, Row

_COLUMNS = "id, event, actor_type, actor_id, actor_email, target_id, details, created_at"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who performed an audited action: a user, a management key, or nobody known (`anonymous`)."""

    type: str
    id: str | None
    email: str | None


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


async def newest_entries(
    ex: Executor, organization_id: str, count: int, after: tuple[float, str] | None
) -> list[AuditEntry]:
    """Up to `count` of the organization's entries newest first, those after the (created_at, id)
    position `after` when it is given."""
    if after is None:
        rows = await ex.fetch(
            f"SELECT {_COLUMNS} FROM audit_log WHERE organization_id = $1"
            " ORDER BY created_at DESC, id DESC LIMIT $2",
            organization_id,
            count,
        )
    else:
        rows = await ex.fetch(
            f"SELECT {_COLUMNS} FROM audit_log WHERE organization_id = $1"
            " AND (created_at < $2 OR (created_at = $2 AND id < $3))"
            " ORDER BY created_at DESC, id DESC LIMIT $4",
            organization_id,
            after[0],
            after[1],
            count,
        )
    return [_entry(r) for r in rows]
