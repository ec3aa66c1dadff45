"""OIDC identity providers of an organization and their storage.

The client secret is kept server-side only: it is never part of a provider's JSON (see 0004_oidc.sql).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.oidc.discovery import ProviderEndpoints
from modelgate.cabinet.oidc.urls import login_url
from modelgate.config import Config
from modelgate.storage.database import Executor, Row

TOKEN_AUTH_METHODS = ("client_secret_basic", "client_secret_post")
PROVISIONED_ROLES = ("member", "admin")

_COLUMNS = (
    "id, organization_id, name, issuer, client_id, client_secret, token_auth_method, scopes,"
    " allowed_domains, default_role, auto_provision, assume_pkce_s256, authorization_endpoint,"
    " token_endpoint, jwks_uri, userinfo_endpoint, signing_algs, discovered_at, created_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """What an owner or admin configures for a provider."""

    name: str
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    token_auth_method: str
    scopes: tuple[str, ...]
    allowed_domains: tuple[str, ...]
    default_role: str
    auto_provision: bool
    # For providers that support PKCE S256 without saying so in discovery (Microsoft Entra ID).
    assume_pkce_s256: bool = False


@dataclass(frozen=True, slots=True)
class OidcProvider:
    """An identity provider members of one organization sign in with."""

    id: str
    organization_id: str
    settings: ProviderSettings
    endpoints: ProviderEndpoints | None
    discovered_at: float | None
    created_at: float
    updated_at: float

    def to_json(self, config: Config) -> dict[str, Any]:
        """The provider object of the API: everything but the client secret."""
        s = self.settings
        return {
            "id": self.id,
            "organizationId": self.organization_id,
            "name": s.name,
            "issuer": s.issuer,
            "clientId": s.client_id,
            "tokenAuthMethod": s.token_auth_method,
            "scopes": list(s.scopes),
            "allowedDomains": list(s.allowed_domains),
            "defaultRole": s.default_role,
            "autoProvision": s.auto_provision,
            "assumePkceS256": s.assume_pkce_s256,
            "discovered": self.endpoints is not None,
            "endpoints": self.endpoints.to_json() if self.endpoints else None,
            "loginUrl": login_url(config, self.id),
            "discoveredAt": isoformat(self.discovered_at),
            "createdAt": isoformat(self.created_at),
            "updatedAt": isoformat(self.updated_at),
        }


def _provider(row: Row) -> OidcProvider:
    endpoints = None
    if row["authorization_endpoint"] is not None:
        endpoints = ProviderEndpoints(
            authorization_endpoint=row["authorization_endpoint"],
            token_endpoint=row["token_endpoint"],
            jwks_uri=row["jwks_uri"],
            userinfo_endpoint=row["userinfo_endpoint"],
            signing_algs=tuple(row["signing_algs"].split()),
        )
    settings = ProviderSettings(
        name=row["name"],
        issuer=row["issuer"],
        client_id=row["client_id"],
        client_secret=row["client_secret"],
        token_auth_method=row["token_auth_method"],
        scopes=tuple(row["scopes"].split()),
        allowed_domains=tuple(row["allowed_domains"].split()),
        default_role=row["default_role"],
        auto_provision=bool(row["auto_provision"]),
        assume_pkce_s256=bool(row["assume_pkce_s256"]),
    )
    return OidcProvider(
        id=row["id"],
        organization_id=row["organization_id"],
        settings=settings,
        endpoints=endpoints,
        discovered_at=row["discovered_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _values(p: OidcProvider) -> tuple[Any, ...]:
    s, e = p.settings, p.endpoints
    return (
        p.id,
        p.organization_id,
        s.name,
        s.issuer,
        s.client_id,
        s.client_secret,
        s.token_auth_method,
        " ".join(s.scopes),
        " ".join(s.allowed_domains),
        s.default_role,
        int(s.auto_provision),
        int(s.assume_pkce_s256),
        e.authorization_endpoint if e else None,
        e.token_endpoint if e else None,
        e.jwks_uri if e else None,
        e.userinfo_endpoint if e else None,
        " ".join(e.signing_algs) if e else None,
        p.discovered_at,
        p.created_at,
        p.updated_at,
    )


async def insert_provider(tx: Executor, provider: OidcProvider) -> None:
    """Store a new provider; raises IntegrityViolation when its name is taken in the organization."""
    placeholders = ", ".join(f"${i}" for i in range(1, 21))
    await tx.execute(f"INSERT INTO oidc_providers ({_COLUMNS}) VALUES ({placeholders})", *_values(provider))


async def save_provider(tx: Executor, provider: OidcProvider) -> None:
    """Write every column of an existing provider."""
    columns = [c.strip() for c in _COLUMNS.split(",")][2:]
    assignments = ", ".join(f"{column} = ${i}" for i, column in enumerate(columns, start=3))
    await tx.execute(
        f"UPDATE oidc_providers SET {assignments} WHERE id = $1 AND organization_id = $2", *_values(provider)
    )


async def delete_provider(tx: Executor, provider_id: str) -> None:
    """Remove a provider; its logins under way go with it."""
    await tx.execute("DELETE FROM oidc_login_states WHERE provider_id = $1", provider_id)
    await tx.execute("DELETE FROM oidc_providers WHERE id = $1", provider_id)


async def provider_in_organization(
    ex: Executor, organization_id: str, provider_id: str
) -> OidcProvider | None:
    """A provider of this organization; one of another organization is None, like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM oidc_providers WHERE id = $1 AND organization_id = $2",
        provider_id,
        organization_id,
    )
    return _provider(row) if row else None


async def provider_by_id(ex: Executor, provider_id: str) -> OidcProvider | None:
    """A provider of any organization (the public login and callback know only its id)."""
    row = await ex.fetchrow(f"SELECT {_COLUMNS} FROM oidc_providers WHERE id = $1", provider_id)
    return _provider(row) if row else None


async def providers_of(ex: Executor, organization_id: str) -> list[OidcProvider]:
    """The organization's providers by name."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM oidc_providers WHERE organization_id = $1 ORDER BY name, id", organization_id
    )
    return [_provider(r) for r in rows]


_LIKE_SPECIALS = ("\\", "%", "_")


def _like_literal(text: str) -> str:
    for special in _LIKE_SPECIALS:
        text = text.replace(special, "\\" + special)
    return text


async def providers_for_domain(ex: Executor, domain: str) -> list[tuple[str, str]]:
    """(id, name) of the discovered providers that allow e-mail `domain`, by name, and only those of the
    organization that verified the domain (see domains.py): naming a domain in `allowed_domains` proves
    nothing.

    `allowed_domains` is stored space-separated (see `_values`); the surrounding spaces make the
    pattern match whole domains only.
    """
    rows = await ex.fetch(
        "SELECT p.id, p.name FROM oidc_providers AS p"
        " JOIN sso_domains AS d ON d.organization_id = p.organization_id AND d.domain = $2"
        " AND d.verified_at IS NOT NULL"
        " WHERE p.authorization_endpoint IS NOT NULL"
        " AND (' ' || p.allowed_domains || ' ') LIKE $1 ESCAPE '\\'"
        " ORDER BY p.name, p.id",
        f"% {_like_literal(domain)} %",
        domain,
    )
    return [(row["id"], row["name"]) for row in rows]
