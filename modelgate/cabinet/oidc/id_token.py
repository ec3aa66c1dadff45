"""Validating an ID token (OpenID Connect Core 3.1.3.7): the signature against the provider's JWKS, then
`iss`, `aud`/`azp`, `exp`, `iat` and the login's `nonce`.

JOSE is done by joserfc, the library authlib itself delegates to since `authlib.jose` was deprecated.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any

import orjson
from joserfc import jwt
from joserfc.errors import ExpiredTokenError, JoseError, MissingClaimError

from modelgate.cabinet.oidc.failures import SsoFailure
from modelgate.cabinet.oidc.jwks import JwksCache, JwksError
from modelgate.cabinet.oidc.providers import OidcProvider

# Clocks of the gateway and the provider may disagree a little.
CLOCK_LEEWAY_SECONDS = 60
# Generous: Entra ID tokens that carry many group ids run to several KiB.
MAX_ID_TOKEN_LENGTH = 64 * 1024


def _invalid(detail: str) -> SsoFailure:
    return SsoFailure("invalid_id_token", detail)


def _protected_header(token: str) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3 or len(token) > MAX_ID_TOKEN_LENGTH:
        raise _invalid("the ID token is not a signed JWT (JWS compact serialization)")
    try:
        header = orjson.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise _invalid("the ID token's header is not valid base64url JSON") from exc
    if not isinstance(header, dict):
        raise _invalid("the ID token's header is not a JSON object")
    return header


async def _verified_claims(jwks: JwksCache, provider: OidcProvider, token: str) -> dict[str, Any]:
    assert provider.endpoints is not None
    header = _protected_header(token)
    alg, kid = header.get("alg"), header.get("kid")
    allowed = provider.endpoints.signing_algs
    if alg not in allowed:
        raise _invalid(f"the ID token is signed with {str(alg)[:20]!r}; accepted: {', '.join(allowed)}")
    if kid is not None and not isinstance(kid, str):
        raise _invalid("the ID token's kid is not a string")
    try:
        keys = await jwks.verification_keys(provider.endpoints.jwks_uri, kid, alg)
    except JwksError as exc:
        raise SsoFailure("jwks_unavailable", str(exc)) from exc
    if not keys:
        raise _invalid(f"the ID token is signed with a key the provider does not publish (kid {kid!r})")
    for key in keys:
        try:
            return jwt.decode(token, key, algorithms=[alg]).claims
        except (JoseError, ValueError, TypeError):
            # A wrong key, a bad signature or a malformed payload: the token is not this provider's.
            continue
    raise _invalid("the ID token's signature does not verify against the provider's keys")


def _check_times(claims: dict[str, Any], at: float) -> None:
    registry = jwt.JWTClaimsRegistry(
        now=int(at),
        leeway=CLOCK_LEEWAY_SECONDS,
        exp={"essential": True},
        iat={"essential": True},
        sub={"essential": True},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError as exc:
        raise _invalid("the ID token has expired") from exc
    except MissingClaimError as exc:
        raise _invalid(f"the ID token lacks the claim {exc.claim}") from exc
    except JoseError as exc:
        raise _invalid(f"the ID token's claims are invalid: {exc.description}") from exc


def _check_audience(claims: dict[str, Any], client_id: str) -> None:
    aud = claims.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    if client_id not in audiences:
        raise _invalid("the ID token was not issued for this client (aud)")
    azp = claims.get("azp")
    # With several audiences the authorized party must name us (Core 3.1.3.7, steps 4 and 5).
    if (len(audiences) > 1 or azp is not None) and azp != client_id:
        raise _invalid("the ID token's authorized party (azp) is not this client")


async def validate_id_token(
    jwks: JwksCache, provider: OidcProvider, token: str, *, nonce: str, at: float
) -> dict[str, Any]:
    """The claims of a valid ID token for this provider and login; raises SsoFailure saying what is wrong."""
    claims = await _verified_claims(jwks, provider, token)
    if claims.get("iss") != provider.settings.issuer:
        raise _invalid("the ID token was issued by another issuer (iss)")
    _check_audience(claims, provider.settings.client_id)
    _check_times(claims, at)
    presented = claims.get("nonce")
    if not isinstance(presented, str) or not hmac.compare_digest(presented.encode(), nonce.encode()):
        raise _invalid("the ID token's nonce does not match this login")
    return claims
