"""Finishing a single sign-on: GET /auth/oidc/callback?code&state.

The state is consumed (single use), the code redeemed with the PKCE verifier, the ID token validated, the
e-mail checked and matched to a user of the provider's organization (or provisioned), a session opened, and
the browser sent to the cabinet with a one-time code. Every outcome is audited when the organization is
known; every failure goes to the cabinet as `?error=<reason>` (or a 400 without a cabinet URL).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from modelgate.cabinet.clock import now
from modelgate.cabinet.oidc.accounts import account_for, has_email, verified_email
from modelgate.cabinet.oidc.code_exchange import fetch_userinfo, oauth_error_code, redeem_code
from modelgate.cabinet.oidc.domains import domain_verified_by
from modelgate.cabinet.oidc.exchange import LOGIN_CODE_TTL_SECONDS, issue_login_code
from modelgate.cabinet.oidc.failures import SsoFailure
from modelgate.cabinet.oidc.id_token import validate_id_token
from modelgate.cabinet.oidc.login import (
    STATE_COOKIE,
    LoginState,
    consume_login_state,
    no_store,
    started_in_this_browser,
)
from modelgate.cabinet.oidc.providers import OidcProvider, provider_by_id
from modelgate.cabinet.oidc.runtime import SsoRuntime, sso_of
from modelgate.cabinet.oidc.urls import CALLBACK_PATH, callback_url, with_query
from modelgate.cabinet.requests import json_response
from modelgate.cabinet.services import CabinetServices, services_of
from modelgate.domain.audit_log import Actor, record
from modelgate.storage import IntegrityViolation

log = logging.getLogger("modelgate.cabinet.oidc")
ANONYMOUS = Actor("anonymous", None, None)
_MAX_PARAMETER_LENGTH = 4096


@dataclass(frozen=True, slots=True)
class _Login:
    """The login a callback belongs to, once its state was accepted."""

    state: LoginState
    provider: OidcProvider


async def finish_login(request: web.Request) -> web.StreamResponse:
    """GET /auth/oidc/callback → 302 to the cabinet with `?code=` (or `?error=`)."""
    services = services_of(request)
    redirect_uri = callback_url(services.config)
    login: _Login | None = None
    try:
        login = await _accepted_login(request, services)
        code = await _complete(request, services, sso_of(request), login, redirect_uri)
    except SsoFailure as failure:
        return await _failed(request, services, login.provider if login else None, failure)
    return _forget_state(_code_answer(services, code))


async def _accepted_login(request: web.Request, services: CabinetServices) -> _Login:
    state = request.query.get("state", "")
    if not state or len(state) > _MAX_PARAMETER_LENGTH:
        raise SsoFailure("invalid_state", "the callback carries no state")
    login_state = await consume_login_state(services.db, state, now())
    if login_state is None:
        raise SsoFailure("invalid_state", "the state is unknown, expired or already used")
    provider = await provider_by_id(services.db, login_state.provider_id)
    if provider is None:
        raise SsoFailure("provider_unavailable", "the identity provider was deleted during the login")
    return _Login(login_state, provider)


async def _complete(
    request: web.Request, services: CabinetServices, sso: SsoRuntime, login: _Login, redirect_uri: str
) -> str:
    provider = login.provider
    if not started_in_this_browser(request, request.query["state"]):
        raise SsoFailure("state_mismatch", "the login was started in another browser")
    # RFC 9207: a provider that names itself in the response must be the one this login went to.
    if (iss := request.query.get("iss")) is not None and iss != provider.settings.issuer:
        raise SsoFailure("issuer_mismatch", "the authorization response came from another issuer (iss)")
    if error := request.query.get("error"):
        raise SsoFailure("idp_error", f"the identity provider answered error {oauth_error_code(error)}")
    code = request.query.get("code", "")
    if not code or len(code) > _MAX_PARAMETER_LENGTH:
        raise SsoFailure("missing_code", "the callback carries no authorization code")
    if provider.endpoints is None:
        raise SsoFailure("provider_unavailable", "the identity provider is no longer discovered")

    tokens = await redeem_code(sso.client, provider, code, login.state.code_verifier, redirect_uri)
    claims = await validate_id_token(sso.jwks, provider, tokens.id_token, nonce=login.state.nonce, at=now())
    if not has_email(claims):
        userinfo = await fetch_userinfo(sso.client, provider, tokens.access_token)
        # Userinfo is about the ID token's subject or about nobody (Core 5.3.2).
        if userinfo.get("sub") != claims["sub"]:
            raise SsoFailure("userinfo_failed", "the userinfo subject differs from the ID token's")
        claims = {**userinfo, **claims}
    email = verified_email(claims, provider)
    domain = email.rpartition("@")[2]
    if not await domain_verified_by(services.db, provider.organization_id, domain):
        # A tenant's provider may say anything about any address; only a domain its organization proved
        # is trusted (issue 33: a provider "for victim.example" of another organization).
        raise SsoFailure(
            "email_domain_not_verified", f"the e-mail domain {domain} is not verified by this organization"
        )
    try:
        return await _open_session(request, services, provider, email)
    except IntegrityViolation:
        # A concurrent first login created the same user; this attempt now finds it.
        return await _open_session(request, services, provider, email)


async def _open_session(
    request: web.Request, services: CabinetServices, provider: OidcProvider, email: str
) -> str:
    at = now()
    async with services.db.transaction() as tx:
        account = await account_for(tx, provider, email, at)
        user = account.user
        token = await services.create_session(tx, user.id, user.organization_id)
        code = await issue_login_code(tx, token, user.email, at)
        await record(
            tx,
            user.organization_id,
            "auth.sso_login",
            Actor("user", user.id, user.email),
            at,
            target_id=user.id,
            details={
                "method": "oidc",
                "providerId": provider.id,
                "provisioned": account.provisioned,
                "role": user.role,
                "address": request.remote,
            },
        )
    return code


async def _failed(
    request: web.Request, services: CabinetServices, provider: OidcProvider | None, failure: SsoFailure
) -> web.StreamResponse:
    log.warning("single sign-on failed: %s (provider %s)", failure.reason, provider.id if provider else "-")
    if provider is not None:
        await record(
            services.db,
            provider.organization_id,
            "auth.sso_failed",
            ANONYMOUS,
            now(),
            target_id=provider.id,
            details={
                "providerId": provider.id,
                "reason": failure.reason,
                "detail": failure.detail,
                "address": request.remote,
            },
        )
    return _forget_state(_failure_answer(services, failure))


def _cabinet_redirect(services: CabinetServices, params: dict[str, str]) -> web.StreamResponse | None:
    cabinet_url = services.config.cabinet.cabinet_url
    if not cabinet_url:
        return None
    return no_store(web.Response(status=302, headers={"Location": with_query(cabinet_url, params)}))


def _code_answer(services: CabinetServices, code: str) -> web.StreamResponse:
    # Without a cabinet to return to, the code comes as JSON (still one-time and short-lived).
    redirect = _cabinet_redirect(services, {"code": code})
    return redirect or no_store(json_response({"code": code, "expiresIn": LOGIN_CODE_TTL_SECONDS}))


def _failure_answer(services: CabinetServices, failure: SsoFailure) -> web.StreamResponse:
    redirect = _cabinet_redirect(services, {"error": failure.reason})
    message = f"single sign-on failed: {failure.reason}: {failure.detail}"
    return redirect or no_store(json_response({"error": message}, status=400))


def _forget_state(response: web.StreamResponse) -> web.StreamResponse:
    response.del_cookie(STATE_COOKIE, path=CALLBACK_PATH)
    return response
