"""A deliberately misbehaving OpenID provider over real HTTP on loopback, for the ID-token attacks a real
provider will not produce: another signing key, wrong audience, wrong nonce or issuer, expired tokens,
unsigned or HMAC tokens, and broken discovery documents. Tokens are signed with joserfc."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from typing import Any

import orjson
from aiohttp import web
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey
from yarl import URL

CLIENT_ID = "fake-client"
CLIENT_SECRET = "fake-secret"
DROP = object()  # a claim override that removes the claim


def rsa_key(kid: str) -> RSAKey:
    """A fresh 2048-bit RSA signing key with this key id."""
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class FakeIdp:
    """Discovery, JWKS, authorize (no login page: it approves at once), token and userinfo endpoints.

    Tests change the attributes between steps to make the next answer wrong in one precise way.
    """

    def __init__(self) -> None:
        self.issuer = ""
        self.published = rsa_key("published-key")
        self.signing_key: RSAKey | OctKey = self.published
        self.header: dict[str, Any] = {"alg": "RS256", "kid": "published-key"}
        self.claim_overrides: dict[str, Any] = {}
        self.discovery_overrides: dict[str, Any] = {}
        self.discovery_raw: bytes | None = None
        self.unsigned = False
        self.response_iss: str | None = None  # RFC 9207 `iss` added to the authorization response
        self.email = "fiona@allowed.test"
        self.jwks_fetches = 0
        self.token_requests: list[dict[str, str]] = []
        self.token_auth_headers: list[str | None] = []
        self._logins: dict[str, dict[str, str]] = {}

    def app(self) -> web.Application:
        """The provider as an aiohttp app."""
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_get("/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        app.router.add_get("/userinfo", self._userinfo)
        return app

    def discovery_document(self) -> dict[str, Any]:
        """The discovery document it serves (before overrides)."""
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    async def _discovery(self, request: web.Request) -> web.Response:
        if self.discovery_raw is not None:
            return web.Response(body=self.discovery_raw, content_type="application/json")
        document = {**self.discovery_document(), **self.discovery_overrides}
        return web.json_response(document, dumps=lambda v: orjson.dumps(v).decode())

    async def _jwks(self, request: web.Request) -> web.Response:
        self.jwks_fetches += 1
        return web.json_response({"keys": [self.published.as_dict(private=False)]})

    async def _authorize(self, request: web.Request) -> web.Response:
        code = secrets.token_urlsafe(16)
        self._logins[code] = dict(request.query)
        target = URL(request.query["redirect_uri"]).update_query(code=code, state=request.query["state"])
        if self.response_iss is not None:
            target = target.update_query(iss=self.response_iss)
        raise web.HTTPFound(str(target))

    async def _token(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        self.token_requests.append({k: str(v) for k, v in form.items()})
        self.token_auth_headers.append(request.headers.get("Authorization"))
        login = self._logins.pop(str(form.get("code")), None)
        if login is None:
            return web.json_response({"error": "invalid_grant"}, status=400)
        verifier = str(form.get("code_verifier", ""))
        if b64url(hashlib.sha256(verifier.encode()).digest()) != login["code_challenge"]:
            return web.json_response({"error": "invalid_grant", "error_description": "PKCE"}, status=400)
        return web.json_response(
            {
                "access_token": "fake-access",
                "token_type": "Bearer",
                "id_token": self._id_token(login["nonce"]),
            }
        )

    async def _userinfo(self, request: web.Request) -> web.Response:
        return web.json_response({"sub": "fake-subject", "email": self.email, "email_verified": True})

    def _id_token(self, nonce: str) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": "fake-subject",
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            "email": self.email,
            "email_verified": True,
        }
        for name, value in self.claim_overrides.items():
            if value is DROP:
                claims.pop(name, None)
            else:
                claims[name] = value
        if self.unsigned:
            header = b64url(orjson.dumps({"alg": "none"}))
            return f"{header}.{b64url(orjson.dumps(claims))}."
        return jwt.encode(self.header, claims, self.signing_key, algorithms=[self.header["alg"]])
