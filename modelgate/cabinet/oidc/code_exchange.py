"""Talking to the provider after it redirected back: redeem the authorization code (with the PKCE verifier)
at the token endpoint, and read the userinfo endpoint when the ID token carries no e-mail."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from modelgate.cabinet.oidc.failures import SsoFailure
from modelgate.cabinet.oidc.idp_client import IdpClient, IdpRequestFailed
from modelgate.cabinet.oidc.providers import OidcProvider

# An OAuth error code is a short token; anything else from the provider is not repeated.
_ERROR_CODE = re.compile(r"^[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}$")


@dataclass(frozen=True, slots=True)
class TokenResponse:
    """What the token endpoint returned that the gateway uses."""

    id_token: str = field(repr=False)
    access_token: str | None = field(repr=False)


def oauth_error_code(value: Any) -> str:
    """An OAuth `error` value safe to log and show, or `unknown`."""
    return value if isinstance(value, str) and _ERROR_CODE.match(value) else "unknown"


def _basic_credentials(client_id: str, client_secret: str) -> str:
    # RFC 6749 section 2.3.1: both parts are form-urlencoded before the Basic encoding.
    pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


async def redeem_code(
    client: IdpClient, provider: OidcProvider, code: str, code_verifier: str, redirect_uri: str
) -> TokenResponse:
    """Exchange an authorization code at the token endpoint; raises SsoFailure when the provider refuses."""
    assert provider.endpoints is not None
    settings = provider.settings
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": code_verifier,
    }
    headers: dict[str, str] = {}
    if settings.token_auth_method == "client_secret_post":
        form |= {"client_id": settings.client_id, "client_secret": settings.client_secret}
    else:
        headers["Authorization"] = _basic_credentials(settings.client_id, settings.client_secret)
    try:
        reply = await client.post_form(provider.endpoints.token_endpoint, form, headers)
    except IdpRequestFailed as exc:
        raise SsoFailure("token_exchange_failed", f"the token endpoint is unreachable: {exc}") from exc
    body = reply.json_object()
    if reply.status != 200:
        error = oauth_error_code(body.get("error") if body else None)
        raise SsoFailure(
            "token_exchange_failed",
            f"the token endpoint refused the code (HTTP {reply.status}, error {error})",
        )
    if body is None:
        raise SsoFailure("token_exchange_failed", "the token endpoint's answer is not a JSON object")
    id_token = body.get("id_token")
    if not isinstance(id_token, str) or not id_token:
        raise SsoFailure("token_exchange_failed", "the token endpoint returned no id_token")
    access_token = body.get("access_token")
    return TokenResponse(id_token, access_token if isinstance(access_token, str) and access_token else None)


async def fetch_userinfo(
    client: IdpClient, provider: OidcProvider, access_token: str | None
) -> dict[str, Any]:
    """The userinfo claims of the signed-in user (OpenID Connect Core 5.3); raises SsoFailure."""
    endpoint = provider.endpoints.userinfo_endpoint if provider.endpoints else None
    if endpoint is None or access_token is None:
        raise SsoFailure("email_missing", "the ID token has no email and the provider offers no userinfo")
    try:
        reply = await client.get(endpoint, headers={"Authorization": f"Bearer {access_token}"})
    except IdpRequestFailed as exc:
        raise SsoFailure("userinfo_failed", f"the userinfo endpoint is unreachable: {exc}") from exc
    claims = reply.json_object()
    if reply.status != 200 or claims is None:
        raise SsoFailure(
            "userinfo_failed", f"the userinfo endpoint gave HTTP {reply.status} without a JSON object"
        )
    return claims
