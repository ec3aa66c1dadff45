"""Organization API keys for the model API: issued with a secret shown once, revoked at once.

States and errors follow the description's key state table; every error here is a 400. Issuing cannot
fail in the model API: it reads keys from the same database, so a committed key is live at once.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from aiohttp import web

from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    optional_email,
    path_id,
    read_json_object,
    required_text,
)
from modelgate.cabinet.services import services_of
from modelgate.cabinet.systems_repository import system_in_organization
from modelgate.cabinet.users import ADMIN_ROLES, first_owner_email
from modelgate.domain.api_keys import ApiKey, alias_in_use, insert_key, key_in_organization, revoke_key
from modelgate.domain.audit_log import record
from modelgate.domain.tokens import hash_token, new_api_key_secret, new_id, secret_hint
from modelgate.storage import IntegrityViolation

log = logging.getLogger("modelgate.cabinet.api_keys")

MAX_ALIAS_LENGTH = 128


def api_key_json(key: ApiKey) -> dict[str, Any]:
    """The API key object of the description, without the secret."""
    return {
        "id": key.id,
        "organizationId": key.organization_id,
        "alias": key.alias,
        "ownerEmail": key.owner_email,
        "systemId": key.system_id,
        "status": key.status,
    }


def _alias_taken() -> CabinetError:
    return bad_request("alias already exists")


def _system_id(body: dict[str, Any]) -> str | None:
    value = body.get("systemId")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise bad_request("systemId must be a string")
    return value


async def create_api_key(request: web.Request) -> web.Response:
    """POST /organization/api-keys {alias, ownerEmail?, systemId?} (owner/admin) → 201 key and secret."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    body = await read_json_object(request)
    value = body.get("alias")
    # The description's message for a missing alias covers empty, blank and mistyped ones too.
    if not isinstance(value, str) or not value.strip():
        raise bad_request("alias is required")
    alias = required_text(body, "alias", max_length=MAX_ALIAS_LENGTH)
    owner_email = optional_email(body, "ownerEmail")
    system_id = _system_id(body)

    secret = new_api_key_secret()
    at = now()
    try:
        async with services.db.transaction() as tx:
            org = await require_organization(tx, principal.organization_id)
            if system_id is not None and await system_in_organization(tx, org.id, system_id) is None:
                raise bad_request(f"system {system_id} not found")
            if await alias_in_use(tx, org.id, alias):
                raise _alias_taken()
            # A management key acts for the organization, so its keys belong to the owner by default.
            owner = owner_email or principal.email or await first_owner_email(tx, org.id) or ""
            key = ApiKey(new_id("key"), org.id, alias, owner, system_id, "active", hash_token(secret))
            await insert_key(
                tx,
                key,
                secret_hint=secret_hint(secret),
                created_by=principal.user_id or principal.key_id,
                at=at,
            )
            await record(
                tx,
                org.id,
                "api_key.created",
                actor_of(principal),
                at,
                target_id=key.id,
                details={"alias": alias, "ownerEmail": owner, "systemId": system_id},
            )
    except IntegrityViolation as exc:
        # A concurrent create took the alias between our check and the insert.
        raise _alias_taken() from exc
    return json_response({**api_key_json(key), "secret": secret}, status=201)


async def revoke_api_key(request: web.Request) -> web.Response:
    """POST /organization/api-keys/{keyId}/revoke (owner/admin) → 200 the key, now `revoked`."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    key_id = path_id(request, "keyId", unknown=bad_request("api key not found"))
    at = now()
    async with services.db.transaction() as tx:
        org = await require_organization(tx, principal.organization_id)
        key = await key_in_organization(tx, org.id, key_id)
        if key is None:
            raise bad_request("api key not found")
        if not await revoke_key(tx, key.id, at):
            raise bad_request("api key already revoked")
        await record(
            tx,
            org.id,
            "api_key.revoked",
            actor_of(principal),
            at,
            target_id=key.id,
            details={"alias": key.alias},
        )
        try:
            settled = await services.key_sink.key_revoked(key.secret_hash, tx)
        except Exception as exc:
            # Raising inside the transaction rolls the revocation back: the key stays active.
            log.warning("api key %s: revocation in the model API failed: %r", key.id, exc)
            raise bad_request(f"api key revocation failed in the model API: {exc}") from exc
    if settled is not None:
        await settled()  # the revoke answers once no gateway process uses the key any more
    return json_response(api_key_json(replace(key, status="revoked")))
