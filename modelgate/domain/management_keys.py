"""Management keys (`sk-mgmt-…`) as stored: the `ManagementKey` record and its repository.

The only SQL on `management_keys`: the cabinet issues, lists and revokes them
(`modelgate/cabinet/management_keys.py`) and authenticates their secrets (`modelgate/cabinet/auth.py`). Reads
by id are scoped to an organization.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.storage.database import Executor

_COLUMNS = "id, organization_id, name, status, secret_hint, created_at, revoked_at"


@dataclass(frozen=True, slots=True)
class ManagementKey:
    """A management key as listed: its name, status and a hint of the secret, never the secret."""

    id: str
    organization_id: str
    name: str
    status: str
    secret_hint: str
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class ManagementKeyHolder:
    """Who an active management key's secret stands for."""

    key_id: str
    organization_id: str


async def management_keys_of(ex: Executor, organization_id: str) -> list[ManagementKey]:
    """The organization's management keys, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM management_keys WHERE organization_id = $1 ORDER BY created_at, id",
        organization_id,
    )
    return [ManagementKey(**r) for r in rows]


async def management_key_in_organization(
    ex: Executor, organization_id: str, key_id: str
) -> ManagementKey | None:
    """A management key of this organization; another organization's is None, exactly like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM management_keys WHERE id = $1 AND organization_id = $2",
        key_id,
        organization_id,
    )
    return ManagementKey(**row) if row else None


async def active_management_key(ex: Executor, secret_hash: str) -> ManagementKeyHolder | None:
    """The active management key whose secret hashes to `secret_hash`, or None (unknown or revoked)."""
    row = await ex.fetchrow(
        "SELECT id, organization_id FROM management_keys WHERE secret_hash = $1 AND status = 'active'",
        secret_hash,
    )
    return ManagementKeyHolder(row["id"], row["organization_id"]) if row else None


async def insert_management_key(
    ex: Executor, key: ManagementKey, *, secret_hash: str, created_by: str | None
) -> None:
    """Store a new management key."""
    await ex.execute(
        "INSERT INTO management_keys (id, organization_id, name, status, secret_hash, secret_hint,"
        " created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        key.id,
        key.organization_id,
        key.name,
        key.status,
        secret_hash,
        key.secret_hint,
        created_by,
        key.created_at,
    )


async def revoke_active_management_key(ex: Executor, key_id: str, at: float) -> bool:
    """Revoke an active management key; False when it was not active (already revoked)."""
    revoked = await ex.execute(
        "UPDATE management_keys SET status = 'revoked', revoked_at = $1 WHERE id = $2 AND status = 'active'",
        at,
        key_id,
    )
    return revoked == 1
