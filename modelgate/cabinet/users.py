"""Users (members of one organization each) and their storage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor, Row

ROLES = ("owner", "admin", "member")
ADMIN_ROLES = ("owner", "admin")

_COLUMNS = "id, organization_id, email, password_hash, role, created_at, email_verified_at"


@dataclass(frozen=True, slots=True)
class User:
    """A person who can log in to the cabinet; the e-mail is unique across all organizations."""

    id: str
    organization_id: str
    email: str
    password_hash: str | None
    role: str
    created_at: float
    # When a link sent to the address was followed (or SSO of a verified domain vouched for it); None: the
    # account holds the address only until someone proves it (docs/cabinet.md, Verified addresses).
    email_verified_at: float | None = None

    @property
    def email_verified(self) -> bool:
        """Whether the account proved it receives mail at its address."""
        return self.email_verified_at is not None

    def to_json(self) -> dict[str, Any]:
        """The member object of the API (never the password hash)."""
        return {
            "id": self.id,
            "email": self.email,
            "role": self.role,
            "emailVerified": self.email_verified,
            "createdAt": isoformat(self.created_at),
        }


def _user(row: Row) -> User:
    return User(**row)


async def insert_user(
    tx: Executor,
    organization_id: str,
    email: str,
    password_hash: str | None,
    role: str,
    at: float,
    *,
    verified: bool = False,
) -> User:
    """Create a user (its address verified when a link sent to it brought them here); raises
    IntegrityViolation when the e-mail already has an account."""
    user = User(new_id("usr"), organization_id, email, password_hash, role, at, at if verified else None)
    await tx.execute(
        f"INSERT INTO users ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        user.id,
        user.organization_id,
        user.email,
        user.password_hash,
        user.role,
        user.created_at,
        user.email_verified_at,
    )
    return user


async def user_by_email(ex: Executor, email: str) -> User | None:
    """The account of a (normalised) e-mail address, in whichever organization it is."""
    row = await ex.fetchrow(f"SELECT {_COLUMNS} FROM users WHERE email = $1", email)
    return _user(row) if row else None


async def user_in_organization(ex: Executor, organization_id: str, user_id: str) -> User | None:
    """A user of this organization; another organization's user is None, exactly like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM users WHERE id = $1 AND organization_id = $2", user_id, organization_id
    )
    return _user(row) if row else None


async def users_of(ex: Executor, organization_id: str) -> list[User]:
    """The members of an organization, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM users WHERE organization_id = $1 ORDER BY created_at, id", organization_id
    )
    return [_user(r) for r in rows]


async def owner_count(ex: Executor, organization_id: str) -> int:
    """How many owners the organization has."""
    count = await ex.fetchval(
        "SELECT COUNT(*) FROM users WHERE organization_id = $1 AND role = 'owner'", organization_id
    )
    return int(count or 0)


async def first_owner_email(ex: Executor, organization_id: str) -> str | None:
    """The e-mail of the organization's longest-standing owner (who a management key acts for)."""
    return await ex.fetchval(
        "SELECT email FROM users WHERE organization_id = $1 AND role = 'owner'"
        " ORDER BY created_at, id LIMIT 1",
        organization_id,
    )


async def set_role(tx: Executor, user_id: str, role: str) -> None:
    """Change a user's role."""
    await tx.execute("UPDATE users SET role = $1 WHERE id = $2", role, user_id)


async def set_password_hash(tx: Executor, user_id: str, password_hash: str) -> None:
    """Replace a user's password hash."""
    await tx.execute("UPDATE users SET password_hash = $1 WHERE id = $2", password_hash, user_id)


async def mark_email_verified(tx: Executor, user_id: str, at: float) -> None:
    """A link sent to the user's address was followed: the address is theirs (the first proof counts)."""
    await tx.execute(
        "UPDATE users SET email_verified_at = $1 WHERE id = $2 AND email_verified_at IS NULL", at, user_id
    )


async def set_email(tx: Executor, user_id: str, email: str, at: float) -> None:
    """Move a user to a new address, proven by the link sent to it."""
    await tx.execute("UPDATE users SET email = $1, email_verified_at = $2 WHERE id = $3", email, at, user_id)


async def delete_user(tx: Executor, user_id: str) -> None:
    """Remove a user and every session of theirs."""
    await tx.execute("DELETE FROM sessions WHERE user_id = $1", user_id)
    await tx.execute("DELETE FROM users WHERE id = $1", user_id)
