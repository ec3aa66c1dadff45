"""OpenID Connect discovery: read `{issuer}/.well-known/openid-configuration` and check that the provider
can do what the gateway needs (the exact issuer, the code flow, PKCE S256, a supported signing algorithm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelgate.cabinet.oidc.idp_client import IdpClient, IdpRequestFailed
from modelgate.cabinet.oidc.urls import idp_url_problem

if TYPE_CHECKING:
    from modelgate.cabinet.oidc.providers import ProviderSettings

# Asymmetric algorithms only: an HS256 ID token would be "signed" with the client secret we also store.
SUPPORTED_SIGNING_ALGS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
_REQUIRED_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri")
_SHOWN_LENGTH = 200


class DiscoveryError(Exception):
    """The provider's discovery document is missing, unreadable or unsuitable; the message says which."""


@dataclass(frozen=True, slots=True)
class ProviderEndpoints:
    """What discovery learned about a provider, stored with it."""

    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    signing_algs: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The endpoints object of the API."""
        return {
            "authorizationEndpoint": self.authorization_endpoint,
            "tokenEndpoint": self.token_endpoint,
            "jwksUri": self.jwks_uri,
            "userinfoEndpoint": self.userinfo_endpoint,
            "idTokenSigningAlgs": list(self.signing_algs),
        }


def discovery_url(issuer: str) -> str:
    """Where the discovery document of an issuer lives (OpenID Connect Discovery 1.0, section 4)."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_LENGTH else text[:_SHOWN_LENGTH] + "…"


async def discover(
    client: IdpClient, settings: ProviderSettings, *, plain_http_loopback: bool
) -> ProviderEndpoints:
    """Fetch and check the discovery document of a provider; raises DiscoveryError saying what is wrong."""
    url = discovery_url(settings.issuer)
    try:
        reply = await client.get(url)
    except IdpRequestFailed as exc:
        raise DiscoveryError(f"the issuer is unreachable: GET {url}: {exc}") from exc
    if reply.status != 200:
        raise DiscoveryError(
            f"the issuer's discovery document is not available: GET {url} gave HTTP {reply.status}"
        )
    document = reply.json_object()
    if document is None:
        raise DiscoveryError(f"the discovery document at {url} is not a valid JSON object")
    return endpoints_of(document, settings, plain_http_loopback=plain_http_loopback)


def endpoints_of(
    document: dict[str, Any], settings: ProviderSettings, *, plain_http_loopback: bool
) -> ProviderEndpoints:
    """Check a discovery document against the provider's settings and the gateway's needs."""
    issuer, token_auth_method = settings.issuer, settings.token_auth_method
    # Exact match (no normalisation): the ID token's `iss` is compared with the same string.
    if document.get("issuer") != issuer:
        raise DiscoveryError(
            f"issuer mismatch: the discovery document names issuer {_shown(document.get('issuer'))},"
            f" the provider is configured with {issuer!r}"
        )
    found: dict[str, str] = {}
    for name in _REQUIRED_ENDPOINTS:
        value = document.get(name)
        if not isinstance(value, str) or not value:
            raise DiscoveryError(f"the discovery document has no {name}")
        if problem := idp_url_problem(value, plain_http_loopback=plain_http_loopback):
            raise DiscoveryError(f"the discovery document's {name} {problem}")
        found[name] = value
    userinfo = document.get("userinfo_endpoint")
    if userinfo is not None and (
        not isinstance(userinfo, str) or idp_url_problem(userinfo, plain_http_loopback=plain_http_loopback)
    ):
        raise DiscoveryError("the discovery document's userinfo_endpoint is not a usable https URL")

    methods = document.get("code_challenge_methods_supported")
    if methods is None:
        # Some providers support S256 without listing it (Entra ID); the admin may vouch for that.
        s256 = settings.assume_pkce_s256
    else:
        s256 = isinstance(methods, list) and "S256" in methods
    if not s256:
        raise DiscoveryError(
            "the provider does not advertise PKCE with S256 (code_challenge_methods_supported);"
            " if it supports S256 regardless, set assumePkceS256"
        )
    response_types = document.get("response_types_supported")
    if isinstance(response_types, list) and "code" not in response_types:
        raise DiscoveryError("the provider does not support the authorization-code flow (response_type code)")
    # The specification's default when the list is absent is client_secret_basic.
    auth_methods = document.get("token_endpoint_auth_methods_supported", ["client_secret_basic"])
    if not isinstance(auth_methods, list) or token_auth_method not in auth_methods:
        raise DiscoveryError(
            f"the provider does not accept {token_auth_method} at its token endpoint"
            " (token_endpoint_auth_methods_supported); change tokenAuthMethod"
        )
    advertised = document.get("id_token_signing_alg_values_supported", ["RS256"])
    algs = tuple(a for a in SUPPORTED_SIGNING_ALGS if isinstance(advertised, list) and a in advertised)
    if not algs:
        raise DiscoveryError(
            f"the provider signs ID tokens with none of {', '.join(SUPPORTED_SIGNING_ALGS)}"
            " (id_token_signing_alg_values_supported)"
        )
    return ProviderEndpoints(
        authorization_endpoint=found["authorization_endpoint"],
        token_endpoint=found["token_endpoint"],
        jwks_uri=found["jwks_uri"],
        userinfo_endpoint=userinfo,
        signing_algs=algs,
    )
