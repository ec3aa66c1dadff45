"""Systems: the information systems or agents of an organization that API keys can be linked to."""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    optional_text,
    path_id,
    read_json_object,
    required_text,
)
from modelgate.cabinet.services import services_of
from modelgate.cabinet.systems_repository import (
    System,
    insert_system,
    name_in_use,
    system_in_organization,
    systems_of,
)
from modelgate.cabinet.systems_repository import delete_system as delete_stored_system
from modelgate.cabinet.systems_repository import update_system as update_stored_system
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.api_keys import count_active_keys_of_system, unlink_system
from modelgate.domain.audit_log import changed_fields, record
from modelgate.domain.policy_rules import count_rules_naming
from modelgate.domain.tokens import new_id
from modelgate.storage import IntegrityViolation

MAX_DESCRIPTION_LENGTH = 2000


def _not_found() -> CabinetError:
    return CabinetError(404, "system not found")


def _name_taken(name: str) -> CabinetError:
    return CabinetError(409, f"a system named {name!r} already exists")


async def create_system(request: web.Request) -> web.Response:
    """POST /systems {name, description?} (owner/admin) → 201 the system."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    body = await read_json_object(request)
    name = required_text(body, "name")
    description = optional_text(body, "description", max_length=MAX_DESCRIPTION_LENGTH) or ""
    at = now()
    system = System(new_id("sys"), principal.organization_id, name, description, at)
    try:
        async with services.db.transaction() as tx:
            await require_organization(tx, principal.organization_id)
            if await name_in_use(tx, principal.organization_id, name):
                raise _name_taken(name)
            await insert_system(tx, system)
            await record(
                tx,
                system.organization_id,
                "system.created",
                actor_of(principal),
                at,
                target_id=system.id,
                details={"name": name},
            )
    except IntegrityViolation as exc:
        raise _name_taken(name) from exc
    return json_response(system.to_json(), status=201)


async def list_systems(request: web.Request) -> web.Response:
    """GET /systems → the organization's systems."""
    principal = await authenticate(request)
    systems = await systems_of(services_of(request).db, principal.organization_id)
    return json_response({"systems": [s.to_json() for s in systems]})


async def get_system(request: web.Request) -> web.Response:
    """GET /systems/{id} → one system of the organization."""
    principal = await authenticate(request)
    system_id = path_id(request, "id", unknown=_not_found())
    system = await system_in_organization(services_of(request).db, principal.organization_id, system_id)
    if system is None:
        raise _not_found()
    return json_response(system.to_json())


async def update_system(request: web.Request) -> web.Response:
    """PATCH /systems/{id} {name?, description?} (owner/admin) → the updated system."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    system_id = path_id(request, "id", unknown=_not_found())
    body = await read_json_object(request)
    if "name" not in body and "description" not in body:
        raise bad_request("give name or description to change")
    name = required_text(body, "name") if "name" in body else None
    description = (
        optional_text(body, "description", max_length=MAX_DESCRIPTION_LENGTH) or ""
        if "description" in body
        else None
    )
    try:
        async with services.db.transaction() as tx:
            system = await system_in_organization(tx, principal.organization_id, system_id)
            if system is None:
                raise _not_found()
            if name is not None and await name_in_use(tx, principal.organization_id, name, system.id):
                raise _name_taken(name)
            updated = replace(
                system,
                name=system.name if name is None else name,
                description=system.description if description is None else description,
            )
            await update_stored_system(tx, updated)
            await record(
                tx,
                updated.organization_id,
                "system.updated",
                actor_of(principal),
                now(),
                target_id=updated.id,
                details={
                    "changes": changed_fields(
                        {"name": system.name, "description": system.description},
                        {"name": updated.name, "description": updated.description},
                    )
                },
            )
    except IntegrityViolation as exc:
        raise _name_taken(name or "") from exc
    return json_response(updated.to_json())


async def delete_system(request: web.Request) -> web.Response:
    """DELETE /systems/{id} (owner/admin): refused while active API keys or policy rules name the system."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    system_id = path_id(request, "id", unknown=_not_found())
    async with services.db.transaction() as tx:
        system = await system_in_organization(tx, principal.organization_id, system_id)
        if system is None:
            raise _not_found()
        linked = await count_active_keys_of_system(tx, system.id)
        if linked:
            raise CabinetError(
                409, f"system {system.id} is still linked to {linked} active API key(s); revoke them first"
            )
        rules = await count_rules_naming(tx, system.organization_id, "system", system.id)
        if rules:
            # A rule naming a deleted system could never match again: the access it grants or denies
            # would change silently. The rules must be removed (or re-targeted) deliberately.
            raise CabinetError(
                409,
                f"system {system.id} is still named by {rules} policy rule(s); delete or change them first",
            )
        # Revoked keys keep their history in the audit log; their link would block the delete.
        await unlink_system(tx, system.id)
        await delete_stored_system(tx, system.id)
        await record(
            tx,
            system.organization_id,
            "system.deleted",
            actor_of(principal),
            now(),
            target_id=system.id,
            details={"name": system.name},
        )
    return json_response({**system.to_json(), "deleted": True})
