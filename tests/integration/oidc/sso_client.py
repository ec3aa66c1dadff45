"""Driving the gateway's single sign-on API in tests: providers, discovery, login URLs and code exchange."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.integration.cabinet.cabinet_client import Account, Cabinet, Reply

ALLOWED_DOMAIN = "allowed.test"


@dataclass(frozen=True, slots=True)
class SsoGateway:
    """The cabinet of one test, served on the module's fixed loopback port (the registered redirect URI)."""

    cabinet: Cabinet
    base_url: str
    operator_token: str

    async def add_provider(self, owner: Account, issuer: str, **fields: Any) -> Reply:
        """POST /auth/oidc/providers with working defaults for the test harness."""
        body = {
            "name": f"idp-{issuer.rsplit(':', 1)[-1]}",
            "issuer": issuer,
            "clientId": "modelgate",
            "clientSecret": "modelgate-test-secret",
            "allowedDomains": [ALLOWED_DOMAIN],
            "autoProvision": True,
            **fields,
        }
        return await self.cabinet.call("POST", "/auth/oidc/providers", token=owner.token, json=body)

    async def discover(self, owner: Account, provider_id: str) -> Reply:
        """POST /auth/oidc/providers/{id}/discover."""
        return await self.cabinet.call(
            "POST", f"/auth/oidc/providers/{provider_id}/discover", token=owner.token
        )

    async def ready_provider(self, owner: Account, issuer: str, **fields: Any) -> str:
        """A created and discovered provider whose allowed domains the operator approved for the owner's
        organization; returns its id."""
        created = await self.add_provider(owner, issuer, **fields)
        assert created.status == 201, created.body
        discovered = await self.discover(owner, created.body["id"])
        assert discovered.status == 200, discovered.body
        for domain in created.body["allowedDomains"]:
            approved = await self.approve_domain(owner, domain)
            assert approved.status == 200, approved.body
        return created.body["id"]

    async def approve_domain(self, owner: Account, domain: str) -> Reply:
        """POST /operator/organizations/{id}/sso-domains {domain}: the operator's approval."""
        organization_id = await self.cabinet.organization_id(owner)
        return await self.cabinet.call(
            "POST",
            f"/operator/organizations/{organization_id}/sso-domains",
            token=self.operator_token,
            json={"domain": domain},
        )

    def login_url(self, provider_id: str) -> str:
        """Where a browser starts signing in with a provider."""
        return f"{self.base_url}/api/auth/oidc/{provider_id}/login"

    async def exchange(self, code: str) -> Reply:
        """POST /auth/oidc/exchange {code}."""
        return await self.cabinet.call("POST", "/auth/oidc/exchange", json={"code": code})

    async def sso_events(self, owner: Account) -> list[dict[str, Any]]:
        """The organization's auth.sso_* audit entries, newest first."""
        return [e for e in await self.cabinet.audit_events(owner) if e["event"].startswith("auth.sso_")]
