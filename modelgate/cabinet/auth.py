"""Authentication of cabinet requests: a Bearer session token or management key, else the web cabinet's
session cookie (with its CSRF token on requests that change state), checked in the database on every request
so that logout, expiry and revocation take effect at once."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from modelgate.cabinet.clock import now
from modelgate.cabinet.requests import CabinetError
from modelgate.cabinet.services import services_of
from modelgate.cabinet.sessions import SessionHolder, live_session
from modelgate.cabinet.users import ROLES, first_owner_email
from modelgate.cabinet.web_security import (
    CSRF_FAILURE,
    SAFE_METHODS,
    SESSION_COOKIE,
    cleared_cookie_header,
    csrf_header_matches,
    csrf_token,
)
from modelgate.domain.management_keys import active_management_key
from modelgate.domain.tokens import API_KEY_PREFIX, MANAGEMENT_KEY_PREFIX, hash_token
from modelgate.storage.database import Executor

SESSION = "session"
MANAGEMENT_KEY = "management_key"
# A management key acts with the rights of an admin of its organization.
MANAGEMENT_KEY_ROLE = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller of a cabinet request."""

    user_id: str | None
    email: str
    role: str
    organization_id: str
    kind: str = SESSION
    session_id: str | None = None
    key_id: str | None = None
    expires_at: float | None = None
    # Set only when the session cookie authenticated the request: the web cabinet reads it from the session.
    csrf_token: str | None = None


def _unauthorized(message: str) -> CabinetError:
    return CabinetError(401, message, headers={"WWW-Authenticate": "Bearer"})


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer …` header; 401 when there is none."""
    if not authorization or not authorization.strip():
        raise _unauthorized("missing bearer token")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("authorization must be a bearer token")
    return token


async def resolve_bearer(ex: Executor, token: str, at: float) -> Principal:
    """The principal a bearer token stands for; 401 for model keys and unknown, ended or expired tokens."""
    if token.startswith(MANAGEMENT_KEY_PREFIX):
        management_key = await active_management_key(ex, hash_token(token))
        if management_key is None:
            raise _unauthorized("invalid or revoked management key")
        email = await first_owner_email(ex, management_key.organization_id)
        return Principal(
            user_id=None,
            email=email or "",
            role=MANAGEMENT_KEY_ROLE,
            organization_id=management_key.organization_id,
            kind=MANAGEMENT_KEY,
            key_id=management_key.key_id,
        )
    if token.startswith(API_KEY_PREFIX):
        raise _unauthorized(
            "model API keys are not accepted by the cabinet; use a session token or a management key"
        )
    holder = await live_session(ex, token, at)
    if holder is None:
        raise _unauthorized("invalid or expired session token")
    return _session_principal(holder)


def _session_principal(holder: SessionHolder, csrf: str | None = None) -> Principal:
    return Principal(
        user_id=holder.user_id,
        email=holder.email,
        role=holder.role,
        organization_id=holder.organization_id,
        kind=SESSION,
        session_id=holder.session_id,
        expires_at=holder.expires_at,
        csrf_token=csrf,
    )


async def resolve_cookie(request: web.Request, token: str) -> Principal:
    """The principal of a session cookie; 401 (dropping the cookie) when its session is over, 403 when the
    request changes state without the session's CSRF token."""
    services = services_of(request)
    # The cookie only ever holds a session token: a key put there is as unknown as a made-up token.
    holder = await live_session(services.db, token, now()) if token.isascii() else None
    if holder is None:
        raise CabinetError(
            401,
            "invalid or expired session",
            headers={"Set-Cookie": cleared_cookie_header(request, services.config)},
        )
    if request.method not in SAFE_METHODS and not csrf_header_matches(request, token):
        raise CabinetError(403, CSRF_FAILURE)
    return _session_principal(holder, csrf_token(token))


async def authenticate(request: web.Request, *, roles: tuple[str, ...] = ROLES) -> Principal:
    """The caller of this request: by `Authorization: Bearer` first, else by the session cookie; 401 when
    not authenticated, 403 when its role is not in `roles` (or a cookie request lacks its CSRF token)."""
    authorization = request.headers.get("Authorization")
    cookie = request.cookies.get(SESSION_COOKIE) if authorization is None else None
    if cookie:
        principal = await resolve_cookie(request, cookie)
    else:
        token = bearer_token(authorization)
        principal = await resolve_bearer(services_of(request).db, token, now())
    if principal.role not in roles:
        raise CabinetError(403, f"this action requires the {' or '.join(roles)} role")
    return principal


def require_session(principal: Principal, action: str) -> str:
    """The session id of a session caller; a management key cannot do `action` (400)."""
    if principal.session_id is None:
        raise CabinetError(400, f"{action} needs a session token, not a management key")
    return principal.session_id
