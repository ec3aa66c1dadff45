"""The mail outbox: every message the cabinet sends is a row first, written in the transaction that made it.

So a message is never lost: a crash, a restart or an SMTP server that is down leaves the row pending, and
the sender (modelgate/cabinet/mail_sender.py) retries it with a growing delay. Without `[email]` the row
is addressed to the operator, who reads its link with `modelgate mail pending`. A body (it holds a link
whose token is stored nowhere else) is kept only until the message is sent or its link expires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor

TRANSPORTS = ("smtp", "operator")
_COLUMNS = (
    "id, kind, organization_id, to_address, subject, body, link, transport, status, attempts, last_error,"
    " next_attempt_at, created_at, expires_at, sent_at"
)


@dataclass(frozen=True, slots=True)
class OutgoingMail:
    """One plain-text message of the outbox."""

    id: str
    kind: str
    organization_id: str | None
    to_address: str
    subject: str
    body: str | None
    link: str | None
    transport: str
    status: str
    attempts: int
    last_error: str | None
    next_attempt_at: float
    created_at: float
    expires_at: float
    sent_at: float | None

    def to_json(self, *, with_link: bool) -> dict[str, Any]:
        """The operator's view (`modelgate mail pending`, `GET /api/operator/mail`)."""
        shown: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "organizationId": self.organization_id,
            "to": self.to_address,
            "subject": self.subject,
            "transport": self.transport,
            "status": self.status,
            "attempts": self.attempts,
            "lastError": self.last_error,
            "nextAttemptAt": isoformat(self.next_attempt_at),
            "createdAt": isoformat(self.created_at),
            "expiresAt": isoformat(self.expires_at),
            "sentAt": isoformat(self.sent_at),
        }
        if with_link:
            shown["link"] = self.link
        return shown


async def enqueue_mail(
    tx: Executor,
    *,
    kind: str,
    organization_id: str | None,
    to_address: str,
    subject: str,
    body: str,
    link: str,
    transport: str,
    at: float,
    expires_at: float,
) -> str:
    """Add a message to the outbox (inside the caller's transaction); returns its id."""
    mail_id = new_id("mail")
    await tx.execute(
        "INSERT INTO mail_outbox (id, kind, organization_id, to_address, subject, body, link, transport,"
        " status, attempts, next_attempt_at, created_at, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', 0, $9, $9, $10)",
        mail_id,
        kind,
        organization_id,
        to_address,
        subject,
        body,
        link,
        transport,
        at,
        expires_at,
    )
    return mail_id


async def withdraw_mail(ex: Executor, kind: str, to_address: str, organization_id: str | None = None) -> None:
    """Unsent messages of a kind to an address (of one organization, when given) whose link no longer works
    (the invitation was revoked or ended): they are not sent, and their links are erased."""
    sql = (
        "UPDATE mail_outbox SET status = 'expired', body = NULL, link = NULL"
        " WHERE status = 'pending' AND kind = $1 AND to_address = $2"
    )
    if organization_id is None:
        await ex.execute(sql, kind, to_address)
    else:
        await ex.execute(sql + " AND organization_id = $3", kind, to_address, organization_id)


async def expire_old_mail(ex: Executor, at: float) -> int:
    """Messages whose link has expired will never be sent: their body and link are erased."""
    return await ex.execute(
        "UPDATE mail_outbox SET status = 'expired', body = NULL, link = NULL"
        " WHERE status = 'pending' AND expires_at <= $1",
        at,
    )


async def due_mail(ex: Executor, at: float, limit: int = 20) -> list[OutgoingMail]:
    """Pending SMTP messages whose next attempt is due, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM mail_outbox WHERE status = 'pending' AND transport = 'smtp'"
        " AND next_attempt_at <= $1 AND expires_at > $1 ORDER BY next_attempt_at, id LIMIT $2",
        at,
        limit,
    )
    return [OutgoingMail(**r) for r in rows]


async def next_due_at(ex: Executor) -> float | None:
    """When the earliest pending SMTP message is due, or None."""
    value = await ex.fetchval(
        "SELECT MIN(next_attempt_at) FROM mail_outbox WHERE status = 'pending' AND transport = 'smtp'"
    )
    return float(value) if value is not None else None


async def claim_mail(ex: Executor, mail: OutgoingMail, lease_until: float) -> bool:
    """Take a due message for one sending attempt; False when another process took it first."""
    claimed = await ex.execute(
        "UPDATE mail_outbox SET next_attempt_at = $1"
        " WHERE id = $2 AND status = 'pending' AND next_attempt_at = $3",
        lease_until,
        mail.id,
        mail.next_attempt_at,
    )
    return claimed == 1


async def mark_sent(ex: Executor, mail_id: str, at: float) -> None:
    """The SMTP server took the message: the body and its link are erased."""
    await ex.execute(
        "UPDATE mail_outbox SET status = 'sent', sent_at = $1, body = NULL, link = NULL,"
        " attempts = attempts + 1, last_error = NULL WHERE id = $2",
        at,
        mail_id,
    )


async def mark_failed(ex: Executor, mail_id: str, error: str, retry_at: float) -> None:
    """An attempt failed: keep the message, say why, try again at `retry_at`."""
    await ex.execute(
        "UPDATE mail_outbox SET attempts = attempts + 1, last_error = $1, next_attempt_at = $2 WHERE id = $3",
        error[:500],
        retry_at,
        mail_id,
    )


async def waiting_mail(ex: Executor, at: float) -> list[OutgoingMail]:
    """Every message not yet sent whose link still works (the operator's list), oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM mail_outbox WHERE status = 'pending' AND expires_at > $1"
        " ORDER BY created_at, id",
        at,
    )
    return [OutgoingMail(**r) for r in rows]
