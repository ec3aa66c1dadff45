"""The URLs single sign-on deals in: the callback the identity provider redirects to, the cabinet landing
page, and the rule for identity-provider URLs (https; plain http on loopback only for a gateway that
itself runs on plain http on loopback, i.e. local development and tests)."""

from __future__ import annotations

import logging
from ipaddress import ip_address
from urllib.parse import urlsplit

from yarl import URL

from modelgate.cabinet.requests import CabinetError
from modelgate.config import Config

# The cabinet is mounted under /api by the host (see cabinet.app).
CALLBACK_PATH = "/api/auth/oidc/callback"
_LOOPBACK_NAMES = ("localhost",)
SSO_NOT_CONFIGURED = "SSO requires server.public_url to be configured"

log = logging.getLogger("modelgate.cabinet.oidc")


def callback_url(config: Config) -> str:
    """The redirect_uri registered at identity providers; 409 without `server.public_url`.

    409, not 503: the request is fine and nothing is down; the gateway's configured state (no public URL,
    so no redirect URI) conflicts with it until an operator sets one, and retrying will not help.
    """
    public_url = config.server.public_url.rstrip("/")
    if not public_url:
        log.warning(
            "single sign-on refused: [server] public_url is not set, so there is no redirect URI;"
            " set it to the gateway's public base URL (the identity provider redirects to"
            " <public_url>%s)",
            CALLBACK_PATH,
        )
        raise CabinetError(409, SSO_NOT_CONFIGURED)
    return public_url + CALLBACK_PATH


def login_url(config: Config, provider_id: str) -> str | None:
    """Where the cabinet sends a browser to sign in with a provider (None without `server.public_url`)."""
    public_url = config.server.public_url.rstrip("/")
    return f"{public_url}/api/auth/oidc/{provider_id}/login" if public_url else None


def with_query(url: str, params: dict[str, str]) -> str:
    """`url` with parameters added to its query (existing ones kept, the same names replaced)."""
    return str(URL(url, encoded=True).update_query(params))


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_allowed(config: Config) -> bool:
    """Whether identity providers may use plain http on loopback: only while the gateway itself runs on
    plain http on loopback (local development and tests), never in a deployment."""
    parts = urlsplit(config.server.public_url)
    return parts.scheme == "http" and _is_loopback(parts.hostname or "")


def idp_url_problem(url: str, *, plain_http_loopback: bool) -> str | None:
    """Why `url` cannot be an identity-provider URL, or None when it can."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return "must be a valid URL"
    if not host or parts.scheme not in ("https", "http"):
        return "must be an https:// URL with a host"
    if parts.scheme == "http" and not (plain_http_loopback and _is_loopback(host)):
        # Tokens and the client secret travel over these URLs; plain http is only for local testing.
        return "must use https"
    if parts.fragment or parts.username or parts.password:
        return "must not contain a fragment or credentials"
    return None
