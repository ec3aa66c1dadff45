"""Organization API keys as stored: the `ApiKey` record and its repository.

The only SQL on `api_keys`. The cabinet issues, lists and revokes keys through these functions
(`modelgate/cabinet/api_keys.py`, `modelgate/cabinet/systems.py`); the model API resolves a presented secret
with its organization's plan (`modelgate/proxy/state/keys.py`, which caches what it reads). Every read by id
is scoped to an organization: another organization's key reads exactly like an unknown one.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.storage.database import Executor

_COLUMNS = "id, organization_id, alias, owner_email, system_id, status, secret_hash"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An organization's key for the model API; only the hash of its secret is stored."""

    id: str
    organization_id: str
    alias: str
    owner_email: str
    system_id: str | None
    status: str
    secret_hash: str


@dataclass(frozen=True, slots=True)
class KeyWithPlan:
    """A key found by its secret, with the plan its organization is on (what the model API caches)."""

    key: ApiKey
    plan_code: str


async def api_keys_of(ex: Executor, organization_id: str) -> list[ApiKey]:
    """The organization's keys, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM api_keys WHERE organization_id = $1 ORDER BY created_at, id", organization_id
    )
    return [ApiKey(**r) for r in rows]


async def key_in_organization(ex: Executor, organization_id: str, key_id: str) -> ApiKey | None:
    """A key of this organization; another organization's key is None, exactly like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM api_keys WHERE id = $1 AND organization_id = $2", key_id, organization_id
    )
    return ApiKey(**row) if row else None


async def key_by_secret_hash(ex: Executor, secret_hash: str) -> KeyWithPlan | None:
    """The key whose secret hashes to `secret_hash` (whatever its status), with its organization's plan."""
    row = await ex.fetchrow(
        "SELECT k.id, k.organization_id, k.alias, k.owner_email, k.system_id, k.status, k.secret_hash,"
        " o.plan_code FROM api_keys k JOIN organizations o ON o.id = k.organization_id"
        " WHERE k.secret_hash = $1",
        secret_hash,
    )
    if row is None:
        return None
    plan_code = row.pop("plan_code")
    return KeyWithPlan(ApiKey(**row), plan_code)


async def alias_in_use(ex: Executor, organization_id: str, alias: str) -> bool:
    """Whether one of the organization's keys, active or revoked, already has this alias."""
    found = await ex.fetchval(
        "SELECT 1 FROM api_keys WHERE organization_id = $1 AND alias = $2", organization_id, alias
    )
    return bool(found)


async def insert_key(
    ex: Executor, key: ApiKey, *, secret_hint: str, created_by: str | None, at: float
) -> None:
    """Store a new key; a UNIQUE alias taken concurrently raises `IntegrityViolation`."""
    await ex.execute(
        "INSERT INTO api_keys (id, organization_id, alias, owner_email, system_id, status,"
        " secret_hash, secret_hint, created_by, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        key.id,
        key.organization_id,
        key.alias,
        key.owner_email,
        key.system_id,
        key.status,
        key.secret_hash,
        secret_hint,
        created_by,
        at,
    )


async def revoke_key(ex: Executor, key_id: str, at: float) -> bool:
    """Revoke an active key; False when it was not active (already revoked)."""
    revoked = await ex.execute(
        "UPDATE api_keys SET status = 'revoked', revoked_at = $1 WHERE id = $2 AND status = 'active'",
        at,
        key_id,
    )
    return revoked == 1


async def count_active_keys_of_system(ex: Executor, system_id: str) -> int:
    """How many active keys are linked to a system."""
    return int(
        await ex.fetchval(
            "SELECT COUNT(*) FROM api_keys WHERE system_id = $1 AND status = 'active'", system_id
        )
    )


async def unlink_system(ex: Executor, system_id: str) -> None:
    """Detach every key from a system (before the system is deleted)."""
    await ex.execute("UPDATE api_keys SET system_id = NULL WHERE system_id = $1", system_id)
