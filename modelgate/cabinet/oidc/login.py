"""Starting a single sign-on: GET /auth/oidc/{providerId}/login redirects to the identity provider with
state, nonce and a PKCE S256 challenge; the state is kept server-side, single use, for ten minutes."""

from __future__ import annotations

import hmac

from aiohttp import web
from authlib.common.security import generate_token
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from modelgate.cabinet.clock import now
from modelgate.cabinet.oidc.providers import provider_by_id
from modelgate.cabinet.oidc.sign_ins import (
    LoginState,
    forget_expired_login_states,
    insert_login_state,
    pending_logins,
    take_login_state,
)
from modelgate.cabinet.oidc.urls import CALLBACK_PATH, callback_url, with_query
from modelgate.cabinet.requests import CabinetError, path_id
from modelgate.cabinet.services import services_of
from modelgate.domain.tokens import hash_token
from modelgate.storage.database import Executor

LOGIN_STATE_TTL_SECONDS = 600
# Anyone may start a login, and each start stores a row: the bound keeps a flood from filling the table.
MAX_PENDING_LOGINS_PER_PROVIDER = 10_000
# Binds the callback to the browser that started the login, so nobody can hand a victim their own login.
STATE_COOKIE = "modelgate_oidc_state"
# 43 characters of [A-Za-z0-9] carry > 250 bits; a PKCE verifier may be 43..128 characters (RFC 7636).
_STATE_LENGTH = 43
_VERIFIER_LENGTH = 64


def _unknown_provider() -> CabinetError:
    return CabinetError(404, "identity provider not found")


def no_store(response: web.StreamResponse) -> web.StreamResponse:
    """Keep a redirect that carries login parameters out of caches and Referer headers."""
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


async def start_login(request: web.Request) -> web.StreamResponse:
    """GET /auth/oidc/{providerId}/login → 302 to the provider's authorization endpoint."""
    services = services_of(request)
    provider_id = path_id(request, "providerId", unknown=_unknown_provider())
    redirect_uri = callback_url(services.config)
    provider = await provider_by_id(services.db, provider_id)
    if provider is None:
        raise _unknown_provider()
    if provider.endpoints is None:
        raise CabinetError(404, "identity provider is not ready for login: run discovery first")

    state = generate_token(_STATE_LENGTH)
    nonce = generate_token(_STATE_LENGTH)
    verifier = generate_token(_VERIFIER_LENGTH)
    at = now()
    async with services.db.transaction() as tx:
        await forget_expired_login_states(tx, at)
        if await pending_logins(tx, provider.id) >= MAX_PENDING_LOGINS_PER_PROVIDER:
            raise CabinetError(
                429,
                "too many sign-ins are under way with this identity provider; try again in a few minutes",
                headers={"Retry-After": "60"},
            )
        login = LoginState(provider.id, nonce, verifier, at + LOGIN_STATE_TTL_SECONDS)
        await insert_login_state(tx, hash_token(state), login, at)
    location = with_query(
        provider.endpoints.authorization_endpoint,
        {
            "response_type": "code",
            "client_id": provider.settings.client_id,
            "redirect_uri": redirect_uri,
            "scope": " ".join(provider.settings.scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": create_s256_code_challenge(verifier),
            "code_challenge_method": "S256",
        },
    )
    response = web.Response(status=302, headers={"Location": location})
    response.set_cookie(
        STATE_COOKIE,
        state,
        max_age=LOGIN_STATE_TTL_SECONDS,
        path=CALLBACK_PATH,
        httponly=True,
        samesite="Lax",
        secure=redirect_uri.startswith("https://"),
    )
    return no_store(response)


async def consume_login_state(ex: Executor, state: str, at: float) -> LoginState | None:
    """The login a state belongs to, removed in the same statement so it works once; None when unknown,
    used or expired."""
    login = await take_login_state(ex, hash_token(state))
    if login is None or login.expires_at <= at:
        return None
    return login


def started_in_this_browser(request: web.Request, state: str) -> bool:
    """Whether the callback comes from the browser that started the login (the state cookie matches)."""
    cookie = request.cookies.get(STATE_COOKIE, "")
    return bool(cookie) and hmac.compare_digest(_raw(cookie), _raw(state))


def _raw(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")
