"""Managing an organization's identity providers (owner/admin): create, read, update, delete, discover."""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.oidc.discovery import DiscoveryError, discover
from modelgate.cabinet.oidc.jwks import JwksError
from modelgate.cabinet.oidc.provider_input import changed_settings, new_provider_settings
from modelgate.cabinet.oidc.providers import (
    OidcProvider,
    delete_provider,
    insert_provider,
    provider_in_organization,
    providers_of,
    save_provider,
)
from modelgate.cabinet.oidc.runtime import sso_of
from modelgate.cabinet.oidc.urls import CALLBACK_PATH, plain_http_allowed
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import CabinetError, bad_request, json_response, path_id, read_json_object
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.audit_log import record
from modelgate.domain.tokens import new_id
from modelgate.storage import IntegrityViolation
from modelgate.storage.database import Executor


def _not_found() -> CabinetError:
    return CabinetError(404, "identity provider not found")


def _name_taken(name: str) -> CabinetError:
    return CabinetError(409, f"an identity provider named {name!r} already exists")


async def _target(ex: Executor, principal: Principal, request: web.Request) -> OidcProvider:
    provider_id = path_id(request, "id", unknown=_not_found())
    provider = await provider_in_organization(ex, principal.organization_id, provider_id)
    if provider is None:
        raise _not_found()
    return provider


async def create_provider(request: web.Request) -> web.Response:
    """POST /auth/oidc/providers (owner/admin) → 201 the provider; the client secret is never returned."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    settings = new_provider_settings(
        await read_json_object(request), plain_http_loopback=plain_http_allowed(services.config)
    )
    at = now()
    provider = OidcProvider(new_id("oidc"), principal.organization_id, settings, None, None, at, at)
    try:
        async with services.db.transaction() as tx:
            await require_organization(tx, principal.organization_id)
            await insert_provider(tx, provider)
            await record(
                tx,
                provider.organization_id,
                "oidc_provider.created",
                actor_of(principal),
                at,
                target_id=provider.id,
                details={"name": settings.name, "issuer": settings.issuer, "clientId": settings.client_id},
            )
    except IntegrityViolation as exc:
        raise _name_taken(settings.name) from exc
    return json_response(provider.to_json(services.config), status=201)


async def list_providers(request: web.Request) -> web.Response:
    """GET /auth/oidc/providers (owner/admin) → the organization's providers."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    found = await providers_of(services.db, principal.organization_id)
    return json_response({"providers": [p.to_json(services.config) for p in found]})


async def get_provider(request: web.Request) -> web.Response:
    """GET /auth/oidc/providers/{id} (owner/admin) → one provider of the organization."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    provider = await _target(services.db, principal, request)
    return json_response(provider.to_json(services.config))


async def update_provider(request: web.Request) -> web.Response:
    """PATCH /auth/oidc/providers/{id} (owner/admin); a new issuer drops the discovered endpoints."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    body = await read_json_object(request)
    try:
        async with services.db.transaction() as tx:
            provider = await _target(tx, principal, request)
            settings = changed_settings(
                provider.settings, body, plain_http_loopback=plain_http_allowed(services.config)
            )
            updated = replace(provider, settings=settings, updated_at=now())
            if settings.issuer != provider.settings.issuer:
                # Endpoints and keys belong to the old issuer; login waits for a new discovery.
                updated = replace(updated, endpoints=None, discovered_at=None)
            await save_provider(tx, updated)
            await record(
                tx,
                provider.organization_id,
                "oidc_provider.updated",
                actor_of(principal),
                updated.updated_at,
                target_id=provider.id,
                details={"fields": sorted(body)},
            )
    except IntegrityViolation as exc:
        raise _name_taken(str(body.get("name"))) from exc
    return json_response(updated.to_json(services.config))


async def remove_provider(request: web.Request) -> web.Response:
    """DELETE /auth/oidc/providers/{id} (owner/admin): the provider and its logins under way go."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    async with services.db.transaction() as tx:
        provider = await _target(tx, principal, request)
        await delete_provider(tx, provider.id)
        await record(
            tx,
            provider.organization_id,
            "oidc_provider.deleted",
            actor_of(principal),
            now(),
            target_id=provider.id,
            details={"name": provider.settings.name, "issuer": provider.settings.issuer},
        )
    return json_response({**provider.to_json(services.config), "deleted": True})


async def discover_provider(request: web.Request) -> web.Response:
    """POST /auth/oidc/providers/{id}/discover (owner/admin) → the checked endpoints, now stored."""
    services = services_of(request)
    sso = sso_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    provider = await _target(services.db, principal, request)
    issuer = provider.settings.issuer
    # The network calls run outside any transaction: a slow provider must not hold a database lock.
    try:
        endpoints = await discover(
            sso.client, provider.settings, plain_http_loopback=plain_http_allowed(services.config)
        )
        key_count = await sso.jwks.load(endpoints.jwks_uri)
    except (DiscoveryError, JwksError) as exc:
        raise bad_request(f"discovery failed: {exc}") from exc
    at = now()
    async with services.db.transaction() as tx:
        current = await _target(tx, principal, request)
        if current.settings != provider.settings:
            raise CabinetError(409, "the provider changed during discovery; discover again")
        await save_provider(tx, replace(current, endpoints=endpoints, discovered_at=at, updated_at=at))
        await record(
            tx,
            current.organization_id,
            "oidc_provider.discovered",
            actor_of(principal),
            at,
            target_id=current.id,
            details={"issuer": issuer, "jwksUri": endpoints.jwks_uri},
        )
    public_url = services.config.server.public_url.rstrip("/")
    return json_response(
        {
            "providerId": current.id,
            "issuer": issuer,
            **endpoints.to_json(),
            "codeChallengeMethod": "S256",
            "signingKeys": key_count,
            "redirectUri": public_url + CALLBACK_PATH if public_url else None,
            "discoveredAt": isoformat(at),
        }
    )
