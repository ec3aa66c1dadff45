"""GET and PATCH /api/organization/settings: what an organization lets its members do.

One setting so far, `membersCreateKeys` (off by default): members may create their own API keys (owned by
themselves, without limits of their own; owners and admins set those). Changing it is audited.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import bad_request, json_response, read_json_object
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.audit_log import record
from modelgate.domain.organizations import members_create_keys, set_members_create_keys
from modelgate.storage.database import Executor

FIELDS = frozenset({"membersCreateKeys"})


async def settings_json(ex: Executor, organization_id: str) -> dict[str, Any]:
    """The settings object of the API."""
    return {"membersCreateKeys": await members_create_keys(ex, organization_id)}


async def get_settings(request: web.Request) -> web.Response:
    """GET /organization/settings (any role) → the organization's settings."""
    principal = await authenticate(request)
    db = services_of(request).db
    org = await require_organization(db, principal.organization_id)
    return json_response(await settings_json(db, org.id))


async def update_settings(request: web.Request) -> web.Response:
    """PATCH /organization/settings {membersCreateKeys} (owner/admin) → the settings after the change."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    body = await read_json_object(request)
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise bad_request(f"unknown field: {unknown[0]}")
    if not body:
        raise bad_request("give at least one of: membersCreateKeys")
    allowed = body["membersCreateKeys"]
    if not isinstance(allowed, bool):
        raise bad_request("membersCreateKeys must be true or false")
    async with services.db.transaction() as tx:
        org = await require_organization(tx, principal.organization_id, lock=True)
        before = await members_create_keys(tx, org.id)
        if before != allowed:
            await set_members_create_keys(tx, org.id, allowed)
            await record(
                tx,
                org.id,
                "organization.settings_changed",
                actor_of(principal),
                now(),
                target_id=org.id,
                details={"membersCreateKeys": {"before": before, "after": allowed}},
            )
        settings = await settings_json(tx, org.id)
    return json_response(settings)
