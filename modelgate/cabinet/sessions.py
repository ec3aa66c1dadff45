"""Cabinet sessions: opaque random tokens, stored only as a hash, that expire and can be ended.

`create_session` is the seam for every way of logging in (password, invitation, OIDC).
"""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.cabinet.clock import now
from modelgate.domain.tokens import hash_token, new_id, new_opaque_token
from modelgate.storage.database import Executor

# The config default (`[cabinet] session_ttl_seconds`); callers with a config pass theirs.
DEFAULT_SESSION_TTL_SECONDS = 43200


@dataclass(frozen=True, slots=True)
class SessionHolder:
    """A live session and the user it belongs to, as read for one request."""

    session_id: str
    user_id: str
    organization_id: str
    email: str
    role: str
    expires_at: float


async def create_session(
    tx: Executor, user_id: str, org_id: str, *, ttl_seconds: int = DEFAULT_SESSION_TTL_SECONDS
) -> str:
    """Open a session for a user of an organization and return its token (shown to the client only)."""
    token = new_opaque_token()
    created = now()
    await tx.execute(
        "INSERT INTO sessions (id, token_hash, user_id, organization_id, created_at, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6)",
        new_id("ses"),
        hash_token(token),
        user_id,
        org_id,
        created,
        created + ttl_seconds,
    )
    return token


async def live_session(ex: Executor, token: str, at: float) -> SessionHolder | None:
    """The session a token opens, if it exists, is not ended and has not expired at `at`."""
    row = await ex.fetchrow(
        "SELECT s.id AS session_id, s.user_id, s.organization_id, u.email, u.role, s.expires_at"
        " FROM sessions s JOIN users u ON u.id = s.user_id AND u.organization_id = s.organization_id"
        " WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > $2",
        hash_token(token),
        at,
    )
    return SessionHolder(**row) if row else None


async def end_session(ex: Executor, session_id: str, at: float) -> None:
    """End one session (logout)."""
    await ex.execute(
        "UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL", at, session_id
    )


async def end_other_sessions(ex: Executor, user_id: str, keep_session_id: str | None, at: float) -> int:
    """End every live session of a user except one; returns how many were ended."""
    return await ex.execute(
        "UPDATE sessions SET revoked_at = $1"
        " WHERE user_id = $2 AND revoked_at IS NULL AND expires_at > $1 AND id <> $3",
        at,
        user_id,
        keep_session_id or "",
    )
