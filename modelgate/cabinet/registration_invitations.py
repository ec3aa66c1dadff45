"""Registration invitations: the operator's offer to one e-mail to register an organization on a given plan.

With `[cabinet] registration = "invite_only"` they are the only way in; in any mode they are how an
organization gets a plan that is not open for self-registration (a credit plan, say). The token is shown
once, stored hashed, expires after `[cabinet] invitation_ttl_seconds` and is used at most once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.requests import CabinetError, bad_request
from modelgate.cabinet.users import user_by_email
from modelgate.config import Config
from modelgate.domain.tokens import hash_token, new_id, new_opaque_token
from modelgate.storage.database import Database, Executor, Row

_COLUMNS = "id, email, plan_code, status, created_at, expires_at, used_at, organization_id"


@dataclass(frozen=True, slots=True)
class RegistrationInvitation:
    """An operator's invitation to register; only the hash of its token is stored."""

    id: str
    email: str
    plan_code: str
    status: str
    created_at: float
    expires_at: float
    used_at: float | None
    organization_id: str | None

    def to_json(self) -> dict[str, Any]:
        """The invitation object of the operator API (the token appears only in the create response)."""
        return {
            "id": self.id,
            "email": self.email,
            "planCode": self.plan_code,
            "status": self.status,
            "createdAt": isoformat(self.created_at),
            "expiresAt": isoformat(self.expires_at),
        }


def _refused(reason: str) -> CabinetError:
    return CabinetError(403, reason)


async def create_registration_invitation(
    tx: Executor, email: str, plan_code: str, at: float, ttl_seconds: int
) -> tuple[RegistrationInvitation, str]:
    """Store a new pending invitation; returns it with its token, which is not kept."""
    token = new_opaque_token()
    invitation = RegistrationInvitation(
        new_id("reginv"), email, plan_code, "pending", at, at + ttl_seconds, None, None
    )
    await tx.execute(
        "INSERT INTO registration_invitations (id, email, plan_code, token_hash, status, created_at,"
        " expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        invitation.id,
        invitation.email,
        invitation.plan_code,
        hash_token(token),
        invitation.status,
        invitation.created_at,
        invitation.expires_at,
    )
    return invitation, token


async def usable_registration_invitation(
    ex: Executor, token: str, email: str, at: float
) -> RegistrationInvitation:
    """The pending, unexpired invitation behind a token for this e-mail, or 403 saying why not."""
    row: Row | None = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM registration_invitations WHERE token_hash = $1", hash_token(token)
    )
    if row is None:
        raise _refused("invitation token is not valid")
    invitation = RegistrationInvitation(**row)
    if invitation.status != "pending":
        raise _refused("invitation has already been used")
    if invitation.expires_at <= at:
        raise _refused("invitation has expired")
    if invitation.email.lower() != email.lower():
        raise _refused("the invitation is for another e-mail address")
    return invitation


async def use_registration_invitation(
    tx: Executor, invitation: RegistrationInvitation, organization_id: str, at: float
) -> None:
    """Mark the invitation used by the new organization, inside the registration's transaction; 403 when a
    concurrent registration used it first or it expired meanwhile."""
    used = await tx.execute(
        "UPDATE registration_invitations SET status = 'used', used_at = $1, organization_id = $2"
        " WHERE id = $3 AND status = 'pending' AND expires_at > $1",
        at,
        organization_id,
        invitation.id,
    )
    if used != 1:
        raise _refused("invitation has already been used")


async def invite_organization(
    db: Database, config: Config, email: str, plan_code: Any, at: float
) -> tuple[dict[str, Any], str]:
    """Create a registration invitation for any plan (a credit plan included): (its JSON, the token).
    400 for an unknown plan, 409 when the e-mail already has an account."""
    if not isinstance(plan_code, str) or not plan_code:
        raise bad_request("planCode is required")
    if config.plan(plan_code) is None:
        raise bad_request(f"planCode must be one of: {', '.join(p.code for p in config.plans)}")
    holder = await user_by_email(db, email)
    if holder is not None and holder.email_verified:
        # An unverified account holds nothing: registering by this invitation proves the address.
        raise CabinetError(409, "an account with this e-mail already exists")
    async with db.transaction() as tx:
        invitation, token = await create_registration_invitation(
            tx, email, plan_code, at, config.cabinet.invitation_ttl_seconds
        )
    return invitation.to_json(), token
