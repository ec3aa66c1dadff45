"""What single sign-on keeps for the life of the cabinet app: the HTTP client for identity providers and
the cache of their signing keys."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from modelgate.cabinet.oidc.idp_client import IdpClient
from modelgate.cabinet.oidc.jwks import JwksCache


@dataclass(frozen=True, slots=True)
class SsoRuntime:
    """The outbound client and the JWKS cache, built once per cabinet app."""

    client: IdpClient
    jwks: JwksCache


SSO = web.AppKey("oidc_sso", SsoRuntime)


def install_sso(app: web.Application) -> None:
    """Give the cabinet app its SSO runtime and close the client at cleanup."""
    client = IdpClient()
    app[SSO] = SsoRuntime(client, JwksCache(client))

    async def close_client(_app: web.Application) -> None:
        await client.close()

    app.on_cleanup.append(close_client)


def sso_of(request: web.Request) -> SsoRuntime:
    """The SSO runtime of the cabinet app serving this request."""
    return request.app[SSO]
