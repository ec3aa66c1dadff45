"""Single sign-on domains in the cabinet: an owner or admin claims, proves (DNS TXT) and releases its
organization's domains; the operator approves a domain for an organization or releases it from whoever
holds it (docs/cabinet.md, "Single sign-on domains")."""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.billing import OPERATOR, organization_not_found
from modelgate.cabinet.clock import now
from modelgate.cabinet.oidc.domain_proof import DnsUnavailable, domain_publishes
from modelgate.cabinet.oidc.domains import (
    DomainClaim,
    add_claim,
    claim_of,
    claimable_domain,
    claims_of,
    domain_not_found,
    mark_verified,
    release_claim,
    verified_holder,
)
from modelgate.cabinet.operator import require_operator
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import CabinetError, bad_request, json_response, path_id, read_json_object
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.audit_log import Actor, record
from modelgate.domain.organizations import organization_by_id
from modelgate.storage.database import Database, Executor


def _only_domain_field(body: dict[str, object]) -> str:
    unknown = sorted(set(body) - {"domain"})
    if unknown:
        raise bad_request(f"unknown field: {unknown[0]} (known: domain)")
    return claimable_domain(body.get("domain"))


def _path_domain(request: web.Request) -> str:
    """The domain named in the path; one that cannot be claimed names no claim (404)."""
    try:
        return claimable_domain(request.match_info.get("domain", ""))
    except CabinetError as exc:
        raise domain_not_found() from exc


async def _audit(ex: Executor, claim: DomainClaim, event: str, actor: Actor, at: float) -> None:
    await record(
        ex,
        claim.organization_id,
        event,
        actor,
        at,
        target_id=claim.domain,
        details={"domain": claim.domain, "verifiedBy": claim.verified_by},
    )


async def list_domains(request: web.Request) -> web.Response:
    """GET /auth/oidc/domains (owner/admin) → the organization's claims, verified or pending."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    claims = await claims_of(services.db, principal.organization_id)
    return json_response({"domains": [claim.to_json() for claim in claims]})


async def claim_domain(request: web.Request) -> web.Response:
    """POST /auth/oidc/domains {domain} (owner/admin) → 201 a pending claim with the TXT record to publish;
    409 when another organization verified the domain."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    domain = _only_domain_field(await read_json_object(request))
    at = now()
    async with services.db.transaction() as tx:
        await require_organization(tx, principal.organization_id, lock=True)
        claim = await add_claim(tx, principal.organization_id, domain, at)
        await _audit(tx, claim, "sso_domain.claimed", actor_of(principal), at)
    return json_response(claim.to_json(), status=201)


async def verify_domain(request: web.Request) -> web.Response:
    """POST /auth/oidc/domains/{domain}/verify (owner/admin): looks the TXT record up; 200 the verified
    claim, 400 when the record is not published, 503 when no DNS server answered."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    domain = _path_domain(request)
    claim = await claim_of(services.db, principal.organization_id, domain)
    if claim is None:
        raise domain_not_found()
    if claim.verified_at is not None:
        return json_response(claim.to_json())
    # The lookup runs outside any transaction: a slow DNS server must not hold a database lock.
    try:
        published = await domain_publishes(claim, services.config.sso)
    except DnsUnavailable as exc:
        raise CabinetError(503, f"the DNS lookup failed, try again: {exc}") from exc
    if not published:
        raise bad_request(
            f"no TXT record {claim.txt_value!r} at _modelgate.{domain} or {domain}"
            " (DNS changes may take a while to appear)"
        )
    at = now()
    async with services.db.transaction() as tx:
        current = await claim_of(tx, principal.organization_id, domain)
        if current is None or current.token != claim.token:
            raise CabinetError(409, "the claim changed during the lookup; verify again")
        verified = await mark_verified(tx, current, at, "dns")
        await _audit(tx, verified, "sso_domain.verified", actor_of(principal), at)
    return json_response(verified.to_json())


async def release_domain(request: web.Request) -> web.Response:
    """DELETE /auth/oidc/domains/{domain} (owner/admin): the claim goes; its providers stop being offered
    for the domain and its sign-ins are refused."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    domain = _path_domain(request)
    at = now()
    async with services.db.transaction() as tx:
        claim = await claim_of(tx, principal.organization_id, domain)
        if claim is None or not await release_claim(tx, principal.organization_id, domain):
            raise domain_not_found()
        await _audit(tx, claim, "sso_domain.released", actor_of(principal), at)
    return json_response({**claim.to_json(), "released": True})


async def approve_domain(db: Database, organization_id: str, domain: str) -> DomainClaim:
    """The operator's approval: the organization holds `domain` verified (claimed now if it was not);
    400 for an unknown organization, 409 when another organization holds the domain."""
    at = now()
    async with db.transaction() as tx:
        if await organization_by_id(tx, organization_id) is None:
            raise organization_not_found()
        claim = await claim_of(tx, organization_id, domain)
        if claim is None:
            claim = await add_claim(tx, organization_id, domain, at)
        if claim.verified_at is None:
            claim = await mark_verified(tx, claim, at, "operator")
            await _audit(tx, claim, "sso_domain.verified", OPERATOR, at)
    return claim


async def release_held_domain(db: Database, domain: str) -> DomainClaim:
    """The operator's release of a verified domain from whichever organization holds it; 404 when none."""
    at = now()
    async with db.transaction() as tx:
        claim = await verified_holder(tx, domain)
        if claim is None:
            raise domain_not_found()
        await release_claim(tx, claim.organization_id, domain)
        await _audit(tx, claim, "sso_domain.released", OPERATOR, at)
    return claim


async def operator_approve_domain(request: web.Request) -> web.Response:
    """POST /operator/organizations/{id}/sso-domains {domain} (operator) → the verified claim."""
    require_operator(request)
    services = services_of(request)
    organization_id = path_id(request, "id", unknown=organization_not_found())
    domain = _only_domain_field(await read_json_object(request))
    claim = await approve_domain(services.db, organization_id, domain)
    return json_response({"organizationId": organization_id, **claim.to_json()})


async def operator_release_domain(request: web.Request) -> web.Response:
    """DELETE /operator/sso-domains/{domain} (operator) → the released claim."""
    require_operator(request)
    services = services_of(request)
    claim = await release_held_domain(services.db, _path_domain(request))
    return json_response({"organizationId": claim.organization_id, **claim.to_json(), "released": True})
