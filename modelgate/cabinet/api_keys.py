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
from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.policy_rule_input import parse_rule_fields
from modelgate.cabinet.policy_rules import announce_policy_change, insert_checked_rule
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
from modelgate.cabinet.users import ADMIN_ROLES, first_owner_email, user_by_email
from modelgate.domain.api_keys import ApiKey, alias_in_use, insert_key, key_in_organization, revoke_key
from modelgate.domain.audit_log import record
from modelgate.domain.organizations import members_create_keys
from modelgate.domain.policy_rules import rules_for_key
from modelgate.domain.tokens import hash_token, new_api_key_secret, new_id, secret_hint
from modelgate.storage import IntegrityViolation
from modelgate.storage.database import Executor

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


# The fields of a create body that write the key's own allow rule (through the rules API's code).
LIMIT_FIELDS = ("budget", "rpm", "tpm", "models")


async def _create_by(tx: Executor, principal: Principal) -> None:
    """403 unless the caller may create keys: owners and admins, and members when their organization lets
    them (`membersCreateKeys`)."""
    if principal.role in ADMIN_ROLES:
        return
    if not await members_create_keys(tx, principal.organization_id):
        # The answer of a role check (`authenticate`), as before the setting existed.
        raise CabinetError(403, f"this action requires the {' or '.join(ADMIN_ROLES)} role")


async def _owner_of_key(tx: Executor, principal: Principal, org_id: str, owner_email: str | None) -> str:
    """The key's owner: an e-mail of a member of the organization (400 otherwise), the caller by default; a
    member creating a key owns it."""
    if principal.role not in ADMIN_ROLES:
        if owner_email is not None and owner_email != principal.email:
            raise CabinetError(403, "a member creates keys for themselves only: leave ownerEmail out")
        return principal.email
    if owner_email is None:
        # A management key acts for the organization, so its keys belong to the owner by default.
        return principal.email or await first_owner_email(tx, org_id) or ""
    user = await user_by_email(tx, owner_email)
    if user is None or user.organization_id != org_id:
        raise bad_request(f"ownerEmail: {owner_email} is not a member of the organization")
    return owner_email


def _key_rule_fields(body: dict[str, Any]) -> dict[str, Any] | None:
    """The key's own allow rule asked for by `budget`, `rpm`, `tpm` and `models`, parsed by the rules API's
    reader (None when the body names none of them); its subject is set once the key exists."""
    asked = {field: body[field] for field in LIMIT_FIELDS if body.get(field) is not None}
    if not asked:
        return None
    return parse_rule_fields({"subjectType": "key", "effect": "allow", **asked})


async def _models_the_key_may_use(tx: Executor, org_id: str, system_id: str | None) -> tuple[str, ...]:
    """The model patterns a new key's own allow rule gets when the create names none: those the allow rules
    of its organization and system already grant (`*` when there are none), so a budget never widens what
    the key may use (allow rules of a key add to those of its organization and system)."""
    rules = await rules_for_key(tx, org_id, "", system_id)
    patterns: dict[str, None] = {}
    for rule in rules:
        if rule.effect == "allow":
            patterns.update(dict.fromkeys(rule.models))
    return tuple(patterns) or ("*",)


async def create_api_key(request: web.Request) -> web.Response:
    """POST /organization/api-keys {alias, ownerEmail?, systemId?, budget?, rpm?, tpm?, models?} (owner/admin,
    or a member when the organization allows) → 201 key and secret. Limits write the key's own allow rule."""
    services = services_of(request)
    principal = await authenticate(request)
    body = await read_json_object(request)
    value = body.get("alias")
    # The description's message for a missing alias covers empty, blank and mistyped ones too.
    if not isinstance(value, str) or not value.strip():
        raise bad_request("alias is required")
    alias = required_text(body, "alias", max_length=MAX_ALIAS_LENGTH)
    owner_email = optional_email(body, "ownerEmail")
    system_id = _system_id(body)
    rule_fields = _key_rule_fields(body)
    if rule_fields is not None and principal.role not in ADMIN_ROLES:
        raise CabinetError(403, "only owners and admins set a key's budget, rpm, tpm or models")

    secret = new_api_key_secret()
    at = now()
    try:
        async with services.db.transaction() as tx:
            org = await require_organization(tx, principal.organization_id)
            await _create_by(tx, principal)
            if system_id is not None and await system_in_organization(tx, org.id, system_id) is None:
                raise bad_request(f"system {system_id} not found")
            if await alias_in_use(tx, org.id, alias):
                raise _alias_taken()
            owner = await _owner_of_key(tx, principal, org.id, owner_email)
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
            if rule_fields is not None:
                if "models" not in rule_fields:
                    rule_fields["models"] = await _models_the_key_may_use(tx, org.id, system_id)
                await insert_checked_rule(tx, services, principal, {**rule_fields, "subjectId": key.id})
    except IntegrityViolation as exc:
        # A concurrent create took the alias between our check and the insert.
        raise _alias_taken() from exc
    if rule_fields is not None:
        await announce_policy_change(services, org.id)
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
