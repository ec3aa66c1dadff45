"""Members of an organization: listing, role changes and removal, with the last owner protected."""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import CabinetError, json_response, path_id, read_json_object, required_choice
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import (
    ADMIN_ROLES,
    ROLES,
    User,
    delete_user,
    owner_count,
    set_role,
    user_in_organization,
    users_of,
)
from modelgate.domain.audit_log import record
from modelgate.storage.database import Executor


def _member_not_found() -> CabinetError:
    return CabinetError(404, "member not found")


def _only_owners_manage_owners(principal: Principal) -> None:
    if principal.role != "owner":
        raise CabinetError(403, "only an owner can grant or take away the owner role")


async def _target(tx: Executor, principal: Principal, user_id: str) -> User:
    user = await user_in_organization(tx, principal.organization_id, user_id)
    if user is None:
        raise _member_not_found()
    return user


async def list_members(request: web.Request) -> web.Response:
    """GET /members → every member of the caller's organization."""
    principal = await authenticate(request)
    members = await users_of(services_of(request).db, principal.organization_id)
    return json_response({"members": [m.to_json() for m in members]})


async def change_role(request: web.Request) -> web.Response:
    """PATCH /members/{userId} {role} (owner/admin); only an owner grants or removes the owner role."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    user_id = path_id(request, "userId", unknown=_member_not_found())
    role = required_choice(await read_json_object(request), "role", ROLES)
    async with services.db.transaction() as tx:
        # The organization lock serialises concurrent demotions, so two owners cannot demote each other.
        await require_organization(tx, principal.organization_id, lock=True)
        user = await _target(tx, principal, user_id)
        if role == user.role:
            return json_response(user.to_json())
        if "owner" in (role, user.role):
            _only_owners_manage_owners(principal)
        if user.role == "owner" and await owner_count(tx, principal.organization_id) <= 1:
            raise CabinetError(409, "the last owner of the organization cannot be demoted")
        await set_role(tx, user.id, role)
        at = now()
        await record(
            tx,
            principal.organization_id,
            "member.role_changed",
            actor_of(principal),
            at,
            target_id=user.id,
            details={"email": user.email, "from": user.role, "to": role},
        )
    return json_response({**user.to_json(), "role": role})


async def remove_member(request: web.Request) -> web.Response:
    """DELETE /members/{userId} (owner/admin): the user and their sessions go; the last owner stays."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    user_id = path_id(request, "userId", unknown=_member_not_found())
    async with services.db.transaction() as tx:
        await require_organization(tx, principal.organization_id, lock=True)
        user = await _target(tx, principal, user_id)
        if user.role == "owner":
            _only_owners_manage_owners(principal)
            if await owner_count(tx, principal.organization_id) <= 1:
                raise CabinetError(409, "the last owner of the organization cannot be removed")
        await delete_user(tx, user.id)
        await record(
            tx,
            principal.organization_id,
            "member.removed",
            actor_of(principal),
            now(),
            target_id=user.id,
            details={"email": user.email, "role": user.role},
        )
    return json_response({**user.to_json(), "removed": True})
