"""Password reset by a link sent to the account's address: single use, valid `[cabinet]
password_reset_ttl_seconds`, at most `email_links_per_hour` links per address and per client address.

Asking never says whether the address has an account (always 202). Following the link sets the new password,
proves the address (it received the link), ends every session of the account and is audited.
"""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.addresses import link_budget_left
from modelgate.cabinet.clock import now
from modelgate.cabinet.email_links import end_links_of, redeem_link, send_link, usable_link
from modelgate.cabinet.mail import Letter, mail_of
from modelgate.cabinet.passwords import hash_password, password_policy_violation
from modelgate.cabinet.requests import (
    bad_request,
    json_response,
    read_json_object,
    required_email,
    required_secret,
)
from modelgate.cabinet.services import services_of
from modelgate.cabinet.sessions import end_other_sessions
from modelgate.cabinet.users import mark_email_verified, set_password_hash, user_by_email
from modelgate.domain.audit_log import Actor, record


async def request_password_reset(request: web.Request) -> web.Response:
    """POST /auth/password-reset {email} → 202 {delivery} whether or not the address has an account."""
    services = services_of(request)
    body = await read_json_object(request)
    email = required_email(body, "email")
    mail = mail_of(request)
    answer = json_response(
        {"delivery": mail.delivery, "message": "if this address has an account, a reset link was sent to it"},
        status=202,
    )
    user = await user_by_email(services.db, email)
    # Over the hourly budget nothing more is sent, and the answer stays the same (no account oracle).
    if user is None or not await link_budget_left(services, email, request.remote):
        return answer
    at = now()
    async with services.db.transaction() as tx:
        await end_links_of(tx, user.id, "reset", at)  # only the newest reset link works
        letter = Letter(
            "reset",
            email,
            "Reset your modelgate password",
            f"Someone (hopefully you) asked to reset the password of the modelgate account {email}."
            " Follow this link to choose a new one:",
            user.organization_id,
        )
        await send_link(
            tx,
            mail,
            letter,
            user_id=user.id,
            at=at,
            ttl_seconds=services.config.cabinet.password_reset_ttl_seconds,
            requested_from=request.remote,
        )
        await record(
            tx,
            user.organization_id,
            "auth.password_reset_requested",
            Actor("user", user.id, user.email),
            at,
            target_id=user.id,
            details={"address": request.remote},
        )
    mail.sent()
    return answer


async def confirm_password_reset(request: web.Request) -> web.Response:
    """POST /auth/password-reset/confirm {token, newPassword} → 200 {email, endedSessions}: the password is
    set and every session of the account ends (sign in again with the new password)."""
    services = services_of(request)
    body = await read_json_object(request)
    token = required_secret(body, "token")
    new = required_secret(body, "newPassword")
    # Checked before it is used, so a refused password leaves the link usable for a better one.
    link = await usable_link(services.db, token, ("reset",), now())
    if problem := password_policy_violation(new, link.email):
        raise bad_request(problem.replace("password", "newPassword", 1))
    new_hash = await hash_password(new)
    at = now()
    async with services.db.transaction() as tx:
        link = await redeem_link(tx, token, ("reset",), at)
        user = await user_by_email(tx, link.email)
        if user is None or user.id != link.user_id:
            raise bad_request("this link is not valid: the account no longer has this address")
        await set_password_hash(tx, user.id, new_hash)
        await mark_email_verified(tx, user.id, at)
        ended = await end_other_sessions(tx, user.id, None, at)
        await record(
            tx,
            user.organization_id,
            "auth.password_reset",
            Actor("user", user.id, user.email),
            at,
            target_id=user.id,
            details={"endedSessions": ended, "address": request.remote},
        )
    return json_response({"email": user.email, "endedSessions": ended})
