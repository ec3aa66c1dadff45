"""Management keys (`sk-mgmt-…`): credentials for automating the cabinet with the rights of an admin.

Only owners issue, list and revoke them; the secret is shown once and only its hash is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from modelgate.cabinet.audit import actor_of, record
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    path_id,
    read_json_object,
    required_text,
)
from modelgate.cabinet.services import services_of
from modelgate.domain.tokens import hash_token, new_id, new_management_key_secret, secret_hint

OWNER_ONLY = ("owner",)
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

    def to_json(self) -> dict[str, Any]:
        """The management key object of the API."""
        return {
            "id": self.id,
            "organizationId": self.organization_id,
            "name": self.name,
            "status": self.status,
            "secretHint": self.secret_hint,
            "createdAt": isoformat(self.created_at),
            "revokedAt": isoformat(self.revoked_at),
        }


def _not_found() -> CabinetError:
    return CabinetError(404, "management key not found")


async def create_management_key(request: web.Request) -> web.Response:
    """POST /organization/management-keys {name} (owner) → 201 the key with its secret, shown only here."""
    services = services_of(request)
    principal = await authenticate(request, roles=OWNER_ONLY)
    name = required_text(await read_json_object(request), "name")
    secret = new_management_key_secret()
    at = now()
    key = ManagementKey(
        new_id("mkey"), principal.organization_id, name, "active", secret_hint(secret), at, None
    )
    async with services.db.transaction() as tx:
        await require_organization(tx, principal.organization_id)
        await tx.execute(
            "INSERT INTO management_keys (id, organization_id, name, status, secret_hash, secret_hint,"
            " created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            key.id,
            key.organization_id,
            key.name,
            key.status,
            hash_token(secret),
            key.secret_hint,
            principal.user_id,
            key.created_at,
        )
        await record(
            tx,
            key.organization_id,
            "management_key.created",
            actor_of(principal),
            at,
            target_id=key.id,
            details={"name": name},
        )
    return json_response({**key.to_json(), "secret": secret}, status=201)


async def list_management_keys(request: web.Request) -> web.Response:
    """GET /organization/management-keys (owner) → the organization's management keys, without secrets."""
    principal = await authenticate(request, roles=OWNER_ONLY)
    rows = await services_of(request).db.fetch(
        f"SELECT {_COLUMNS} FROM management_keys WHERE organization_id = $1 ORDER BY created_at, id",
        principal.organization_id,
    )
    return json_response({"managementKeys": [ManagementKey(**r).to_json() for r in rows]})


async def revoke_management_key(request: web.Request) -> web.Response:
    """POST /organization/management-keys/{id}/revoke (owner) → the key, `revoked` and refused at once."""
    services = services_of(request)
    principal = await authenticate(request, roles=OWNER_ONLY)
    key_id = path_id(request, "id", unknown=_not_found())
    at = now()
    async with services.db.transaction() as tx:
        row = await tx.fetchrow(
            f"SELECT {_COLUMNS} FROM management_keys WHERE id = $1 AND organization_id = $2",
            key_id,
            principal.organization_id,
        )
        if row is None:
            raise _not_found()
        key = ManagementKey(**row)
        revoked = await tx.execute(
            "UPDATE management_keys SET status = 'revoked', revoked_at = $1"
            " WHERE id = $2 AND status = 'active'",
            at,
            key.id,
        )
        if revoked != 1:
            raise bad_request("management key already revoked")
        await record(
            tx,
            key.organization_id,
            "management_key.revoked",
            actor_of(principal),
            at,
            target_id=key.id,
            details={"name": key.name},
        )
    return json_response(replace(key, status="revoked", revoked_at=at).to_json())
