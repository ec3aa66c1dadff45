"""Single sign-ons under way, as stored: the login states between the redirect to the identity provider
and its callback (`oidc_login_states`), and the one-time login codes the callback hands out
(`oidc_login_codes`). The only SQL on both tables; `modelgate/cabinet/oidc/login.py` and
`modelgate/cabinet/oidc/exchange.py` hold the handlers.

Each is looked up by the hash of its secret and taken by a DELETE … RETURNING, so it works once even under
concurrent use.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.storage.database import Executor


@dataclass(frozen=True, slots=True)
class LoginState:
    """A login under way, as remembered between the redirect to the provider and the callback."""

    provider_id: str
    nonce: str
    code_verifier: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class StoredLoginCode:
    """A one-time login code as stored: the session token sealed under the code, for whom, until when."""

    sealed_token: str
    email: str
    expires_at: float


async def forget_expired_login_states(tx: Executor, at: float) -> None:
    """Delete the login states that expired before `at`."""
    await tx.execute("DELETE FROM oidc_login_states WHERE expires_at < $1", at)


async def pending_logins(tx: Executor, provider_id: str) -> int:
    """How many logins with this provider are under way."""
    pending = await tx.fetchval("SELECT COUNT(*) FROM oidc_login_states WHERE provider_id = $1", provider_id)
    return int(pending or 0)


async def insert_login_state(tx: Executor, state_hash: str, state: LoginState, at: float) -> None:
    """Remember a login under the hash of its state parameter."""
    await tx.execute(
        "INSERT INTO oidc_login_states (state_hash, provider_id, nonce, code_verifier, created_at,"
        " expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
        state_hash,
        state.provider_id,
        state.nonce,
        state.code_verifier,
        at,
        state.expires_at,
    )


async def take_login_state(ex: Executor, state_hash: str) -> LoginState | None:
    """The login stored under this state hash, removed in the same statement; None when unknown or used."""
    row = await ex.fetchrow(
        "DELETE FROM oidc_login_states WHERE state_hash = $1"
        " RETURNING provider_id, nonce, code_verifier, expires_at",
        state_hash,
    )
    if row is None:
        return None
    return LoginState(row["provider_id"], row["nonce"], row["code_verifier"], row["expires_at"])


async def insert_login_code(tx: Executor, code_hash: str, code: StoredLoginCode, at: float) -> None:
    """Store a one-time login code under its hash, deleting the codes that expired before `at`."""
    await tx.execute("DELETE FROM oidc_login_codes WHERE expires_at < $1", at)
    await tx.execute(
        "INSERT INTO oidc_login_codes (code_hash, sealed_token, email, created_at, expires_at)"
        " VALUES ($1, $2, $3, $4, $5)",
        code_hash,
        code.sealed_token,
        code.email,
        at,
        code.expires_at,
    )


async def take_login_code(ex: Executor, code_hash: str) -> StoredLoginCode | None:
    """The login code stored under this hash, removed in the same statement; None when unknown or used."""
    row = await ex.fetchrow(
        "DELETE FROM oidc_login_codes WHERE code_hash = $1 RETURNING sealed_token, email, expires_at",
        code_hash,
    )
    return StoredLoginCode(row["sealed_token"], row["email"], row["expires_at"]) if row else None
