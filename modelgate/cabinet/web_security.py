"""The browser session of the web cabinet: the `mg_session` cookie, its CSRF token, and the security headers
of the pages.

The cookie holds the same opaque session token the sign-in body returns (API clients keep using it as a
Bearer token). `HttpOnly` keeps it from scripts, `SameSite=Strict` from other sites' requests, `Path=/api`
from every URL that is not the cabinet API, and `Secure` from plain http whenever the gateway is reached
over https. A request authenticated by the cookie that changes state must also carry `X-CSRF-Token`: the
SHA-256 of a label and the session token, which a page of another origin cannot read or compute.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from modelgate.cabinet.requests import json_response
from modelgate.config import Config

SESSION_COOKIE = "mg_session"
COOKIE_PATH = "/api"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FAILURE = "missing or invalid CSRF token"
# Methods that only read: a cookie request may use them without the CSRF header.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CSRF_LABEL = b"modelgate-csrf:"

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
    " font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# On every answer of `/` and `/assets/*` (modelgate/cabinet/web_assets.py).
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def _bytes(text: str) -> bytes:
    # Header values may carry any byte (decoded with surrogates); this never fails on them.
    return text.encode("utf-8", "surrogatepass")


def csrf_token(session_token: str) -> str:
    """The CSRF token of a session: derived from its token, so nothing needs storing."""
    return hashlib.sha256(_CSRF_LABEL + _bytes(session_token)).hexdigest()


def csrf_header_matches(request: web.Request, session_token: str) -> bool:
    """Whether the request's `X-CSRF-Token` is the session's CSRF token (compared in constant time)."""
    sent = request.headers.get(CSRF_HEADER, "")
    return bool(sent) and hmac.compare_digest(_bytes(sent), _bytes(csrf_token(session_token)))


def over_https(request: web.Request, config: Config) -> bool:
    """Whether the browser reaches the gateway over https: this request did, or the public URL says so."""
    return request.secure or config.server.public_url.startswith("https://")


def from_own_page(request: web.Request, config: Config) -> bool:
    """Whether a browser sent this request from a page of this gateway.

    Browsers add `Sec-Fetch-Site` to every request to an https or loopback origin, and `Origin` to every
    POST; API clients send neither, and a page of another site cannot make a browser claim to be ours.
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site.lower() == "same-origin"
    origin = request.headers.get("Origin")
    if not origin or origin == "null":
        return False
    try:
        origin_host = urlsplit(origin).netloc.lower()
    except ValueError:  # not a URL: no browser sent it
        return False
    public_host = urlsplit(config.server.public_url).netloc.lower()
    return bool(origin_host) and origin_host in (request.host.lower(), public_host)


def set_session_cookie(
    request: web.Request, response: web.StreamResponse, config: Config, session_token: str
) -> None:
    """Give the browser the session: the cookie lives as long as the session."""
    response.set_cookie(
        SESSION_COOKIE,
        session_token,
        max_age=config.cabinet.session_ttl_seconds,
        path=COOKIE_PATH,
        httponly=True,
        samesite="Strict",
        secure=over_https(request, config),
    )


def clear_session_cookie(request: web.Request, response: web.StreamResponse, config: Config) -> None:
    """Tell the browser to drop the session cookie (Max-Age=0)."""
    response.del_cookie(
        SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="Strict", secure=over_https(request, config)
    )


def cleared_cookie_header(request: web.Request, config: Config) -> str:
    """The `Set-Cookie` value that drops the session cookie, for an error answer."""
    response = web.Response()
    clear_session_cookie(request, response, config)
    return response.cookies[SESSION_COOKIE].OutputString()


def signed_in_response(
    request: web.Request, config: Config, body: dict[str, Any], session_token: str, status: int = 200
) -> web.Response:
    """The answer of a sign-in (login, registration, SSO exchange, accepted invitation): the body the API
    defines, plus, when a page of this gateway asked, the session cookie and `csrfToken`.

    API clients get exactly the documented body and no cookie (a client's cookie jar must not turn its
    later unauthenticated requests into signed-in ones); a sign-in another site made a browser send gets
    no cookie either, so no site can sign a visitor into an account of its choosing.
    """
    if not from_own_page(request, config):
        return json_response(body, status=status)
    response = json_response({**body, "csrfToken": csrf_token(session_token)}, status=status)
    set_session_cookie(request, response, config, session_token)
    return response
