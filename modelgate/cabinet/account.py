"""The caller's own account: login, the current session, logout, and setting or changing the password."""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.auth import authenticate, require_session
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.email_links import end_links_of
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.passwords import (
    hash_password,
    needs_rehash,
    password_policy_violation,
    verify_password,
)
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    read_json_object,
    required_email,
    required_secret,
)
from modelgate.cabinet.services import CabinetServices, services_of
from modelgate.cabinet.sessions import end_other_sessions, end_session
from modelgate.cabinet.throttle import LoginThrottle
from modelgate.cabinet.users import set_password_hash, user_by_email, user_in_organization
from modelgate.cabinet.web_security import clear_session_cookie, signed_in_response
from modelgate.domain.audit_log import Actor, record

# One message for an unknown e-mail and a wrong password, so the answer does not reveal which it was.
BAD_CREDENTIALS = "invalid e-mail or password"


def login_throttle(services: CabinetServices) -> LoginThrottle:
    """The throttle policy of the configuration."""
    cabinet = services.config.cabinet
    return LoginThrottle(
        cabinet.login_max_failures, cabinet.login_first_delay_seconds, float(cabinet.login_lockout_seconds)
    )


async def throttled_password_check(
    request: web.Request, email: str, stored_hash: str | None, password: str
) -> bool:
    """Whether `password` matches `stored_hash`, counted by the login throttle for `email` and the client
    address (429 while throttled). No stored hash (unknown e-mail, passwordless account) never matches,
    and takes the same time."""
    services = services_of(request)
    throttle = login_throttle(services)
    admission = await throttle.admit(services.db, email, request.remote, now())
    if not await verify_password(stored_hash, password):
        return False
    await throttle.succeeded(services.db, admission, now())
    return True


async def login(request: web.Request) -> web.Response:
    """POST /auth/login {email, password} → 200 {token, email}; 401 on bad credentials, 429 when throttled."""
    services = services_of(request)
    body = await read_json_object(request)
    email = required_email(body, "email")
    password = required_secret(body, "password")
    user = await user_by_email(services.db, email)
    if not await throttled_password_check(request, email, user.password_hash if user else None, password):
        at = now()
        if user is not None:
            await record(
                services.db,
                user.organization_id,
                "auth.login_failed",
                Actor("user", user.id, user.email),
                at,
                target_id=user.id,
                details={"address": request.remote},
            )
        raise CabinetError(401, BAD_CREDENTIALS)
    assert user is not None and user.password_hash is not None

    upgraded_hash = await hash_password(password) if needs_rehash(user.password_hash) else None
    async with services.db.transaction() as tx:
        if upgraded_hash is not None:
            await set_password_hash(tx, user.id, upgraded_hash)
        token = await services.create_session(tx, user.id, user.organization_id)
        await record(
            tx,
            user.organization_id,
            "auth.login",
            Actor("user", user.id, user.email),
            now(),
            target_id=user.id,
            details={"address": request.remote, "method": "password"},
        )
    return signed_in_response(request, services.config, {"token": token, "email": user.email}, token)


async def current_session(request: web.Request) -> web.Response:
    """GET /auth/session → the caller (user or management key), its organization and the session expiry;
    with the session cookie also the `csrfToken` the web cabinet sends on requests that change state."""
    principal = await authenticate(request)
    db = services_of(request).db
    org = await require_organization(db, principal.organization_id)
    user = await user_in_organization(db, principal.organization_id, principal.user_id or "")
    body = {
        "kind": principal.kind,
        "user": {
            "id": principal.user_id,
            "email": principal.email,
            "role": principal.role,
            "emailVerified": user.email_verified if user else None,
            "passwordSet": user.password_hash is not None if user else None,
        },
        "organization": {"id": org.id, "legalName": org.legal_name, "planCode": org.plan_code},
        "expiresAt": isoformat(principal.expires_at),
    }
    if principal.csrf_token is not None:
        body["csrfToken"] = principal.csrf_token
    return json_response(body)


async def logout(request: web.Request) -> web.Response:
    """POST /auth/logout → ends the session of the presented token (or cookie) and drops the cookie."""
    services = services_of(request)
    principal = await authenticate(request)
    session_id = require_session(principal, "logout")
    at = now()
    async with services.db.transaction() as tx:
        await end_session(tx, session_id, at)
        await record(
            tx,
            principal.organization_id,
            "auth.logout",
            Actor("user", principal.user_id, principal.email),
            at,
            target_id=principal.user_id,
        )
    response = json_response({"ok": True})
    clear_session_cookie(request, response, services.config)
    return response


async def change_password(request: web.Request) -> web.Response:
    """POST /auth/password {currentPassword, newPassword} → changes it and ends the user's other sessions.

    An account without a password (it joined by invitation token or single sign-on) sets its first one
    with `{newPassword}` alone: the session is the proof, as there is no current password to check.
    """
    services = services_of(request)
    principal = await authenticate(request)
    session_id = require_session(principal, "changing a password")
    body = await read_json_object(request)
    user = await user_in_organization(services.db, principal.organization_id, principal.user_id or "")
    if user is None:
        raise CabinetError(401, "invalid or expired session token")
    first_password = user.password_hash is None
    current = None if first_password else required_secret(body, "currentPassword")
    new = required_secret(body, "newPassword")
    if problem := password_policy_violation(new, user.email):
        raise bad_request(problem.replace("password", "newPassword", 1))
    if new == current:
        raise bad_request("newPassword must differ from currentPassword")

    # Guessing the current password through a stolen session is throttled like a login.
    if current is not None and not await throttled_password_check(
        request, user.email, user.password_hash, current
    ):
        raise bad_request("currentPassword is incorrect")

    new_hash = await hash_password(new)
    at = now()
    async with services.db.transaction() as tx:
        await set_password_hash(tx, user.id, new_hash)
        await end_links_of(tx, user.id, "reset", at)  # a reset link sent before stops working
        ended = await end_other_sessions(tx, user.id, session_id, at)
        await record(
            tx,
            user.organization_id,
            "auth.password_set" if first_password else "auth.password_changed",
            Actor("user", user.id, user.email),
            at,
            target_id=user.id,
            details={"endedSessions": ended},
        )
    return json_response({"ok": True, "endedSessions": ended})
