"""Member invitations as stored: the `Invitation` record and the only SQL on `invitations`.

Reads by id are scoped to an organization; a token is found by its hash only (the token itself is never
stored). The handlers are in `modelgate/cabinet/invitations.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.mail_outbox import withdraw_mail
from modelgate.storage.database import Executor

_COLUMNS = (
    "id, organization_id, email, role, status, created_by, created_at, expires_at, accepted_at, revoked_at,"
    " invited_by"
)


@dataclass(frozen=True, slots=True)
class Invitation:
    """An offer to join an organization with a role; only the hash of its token is stored."""

    id: str
    organization_id: str
    email: str
    role: str
    status: str
    created_by: str | None
    created_at: float
    expires_at: float
    accepted_at: float | None
    revoked_at: float | None
    # The address of who invited (for a management key: the owner it acts for), shown on the accept page.
    invited_by: str | None = None

    def status_at(self, at: float) -> str:
        """`pending`, `accepted`, `revoked`, or `expired` for a pending one past its expiry."""
        return "expired" if self.status == "pending" and self.expires_at <= at else self.status

    def to_json(self, at: float) -> dict[str, Any]:
        """The invitation object of the API (the token appears only in the create response)."""
        return {
            "id": self.id,
            "organizationId": self.organization_id,
            "email": self.email,
            "role": self.role,
            "status": self.status_at(at),
            "createdAt": isoformat(self.created_at),
            "expiresAt": isoformat(self.expires_at),
            "acceptedAt": isoformat(self.accepted_at),
            "revokedAt": isoformat(self.revoked_at),
            "invitedBy": self.invited_by,
        }


async def invitation_in_organization(
    ex: Executor, organization_id: str, invitation_id: str
) -> Invitation | None:
    """An invitation of this organization; another organization's is None, exactly like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM invitations WHERE id = $1 AND organization_id = $2",
        invitation_id,
        organization_id,
    )
    return Invitation(**row) if row else None


async def invitation_by_token_hash(ex: Executor, token_hash: str) -> Invitation | None:
    """The invitation whose token hashes to `token_hash`, whatever its status."""
    row = await ex.fetchrow(f"SELECT {_COLUMNS} FROM invitations WHERE token_hash = $1", token_hash)
    return Invitation(**row) if row else None


async def invitations_of(ex: Executor, organization_id: str) -> list[Invitation]:
    """The organization's invitations, newest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM invitations WHERE organization_id = $1 ORDER BY created_at DESC, id DESC",
        organization_id,
    )
    return [Invitation(**r) for r in rows]


async def insert_invitation(tx: Executor, invitation: Invitation, token_hash: str) -> None:
    """Store a new invitation with the hash of its token."""
    await tx.execute(
        "INSERT INTO invitations (id, organization_id, email, role, token_hash, status, created_by,"
        " created_at, expires_at, invited_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        invitation.id,
        invitation.organization_id,
        invitation.email,
        invitation.role,
        token_hash,
        invitation.status,
        invitation.created_by,
        invitation.created_at,
        invitation.expires_at,
        invitation.invited_by,
    )


async def pending_to(ex: Executor, organization_id: str, email: str) -> Invitation | None:
    """The organization's pending invitation to the address (one at most: a unique index says so), expired
    or not."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM invitations"
        " WHERE organization_id = $1 AND email = $2 AND status = 'pending'",
        organization_id,
        email,
    )
    return Invitation(**row) if row else None


async def end_pending_invitations(tx: Executor, email: str, at: float) -> None:
    """The address got its account (by an invitation, registration or single sign-on): its other pending
    invitations can never be accepted (an address has one account), so they end (revoked)."""
    await tx.execute(
        "UPDATE invitations SET status = 'revoked', revoked_at = $1 WHERE email = $2 AND status = 'pending'",
        at,
        email,
    )
    await withdraw_mail(tx, "invitation", email)


async def mark_revoked(tx: Executor, invitation_id: str, at: float) -> None:
    """Revoke an invitation (the handler has checked it is pending)."""
    await tx.execute(
        "UPDATE invitations SET status = 'revoked', revoked_at = $1 WHERE id = $2", at, invitation_id
    )


async def consume(tx: Executor, invitation_id: str, at: float) -> bool:
    """Accept a pending, unexpired invitation; False when it was used, revoked or expired meanwhile."""
    consumed = await tx.execute(
        "UPDATE invitations SET status = 'accepted', accepted_at = $1"
        " WHERE id = $2 AND status = 'pending' AND expires_at > $1",
        at,
        invitation_id,
    )
    return consumed == 1
