"""Management keys (`sk-mgmt-…`): credentials for automating the cabinet with the rights of an admin.

Only owners issue, list and revoke them; the secret is shown once and only its hash is stored.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiohttp import web

from modelgate.cabinet.audit import actor_of
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
from modelgate.domain.audit_log import record
from modelgate.domain.management_keys import (
    ManagementKey,
    insert_management_key,
    management_key_in_organization,
    management_keys_of,
    revoke_active_management_key,
)
from modelgate.domain.tokens import hash_token, new_id, new_management_key_secret, secret_hint

OWNER_ONLY = ("owner",)


def management_key_json(key: ManagementKey) -> dict[str, Any]:
    """The management key object of the API."""
    return {
        "id": key.id,
        "organizationId": key.organization_id,
        "name": key.name,
        "status": key.status,
        "secretHint": key.secret_hint,
        "createdAt": isoformat(key.created_at),
        "revokedAt": isoformat(key.revoked_at),
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
        await insert_management_key(tx, key, secret_hash=hash_token(secret), created_by=principal.user_id)
        await record(
            tx,
            key.organization_id,
            "management_key.created",
            actor_of(principal),
            at,
            target_id=key.id,
            details={"name": name},
        )
    return json_response({**management_key_json(key), "secret": secret}, status=201)


async def list_management_keys(request: web.Request) -> web.Response:
    """GET /organization/management-keys (owner) → the organization's management keys, without secrets."""
    principal = await authenticate(request, roles=OWNER_ONLY)
    keys = await management_keys_of(services_of(request).db, principal.organization_id)
    return json_response({"managementKeys": [management_key_json(k) for k in keys]})


async def revoke_management_key(request: web.Request) -> web.Response:
    """POST /organization/management-keys/{id}/revoke (owner) → the key, `revoked` and refused at once."""
    services = services_of(request)
    principal = await authenticate(request, roles=OWNER_ONLY)
    key_id = path_id(request, "id", unknown=_not_found())
    at = now()
    async with services.db.transaction() as tx:
        key = await management_key_in_organization(tx, principal.organization_id, key_id)
        if key is None:
            raise _not_found()
        if not await revoke_active_management_key(tx, key.id, at):
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
    return json_response(management_key_json(replace(key, status="revoked", revoked_at=at)))
