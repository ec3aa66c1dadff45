"""Verified addresses: an address becomes an account's only through a link sent to it (or single sign-on from
a verified domain), and an unverified account never holds its address against the person who proves it.

The rules (docs/cabinet.md, Verified addresses) live here once: `claim_address` is what every way in calls
when a person has just proved an address — it removes an unverified account that held it, and refuses
(409) only when a verified account holds it. The endpoints: ask for a new verification link, and move
one's account to another address (the links are followed in modelgate/cabinet/link_follow.py).
"""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.account import BAD_CREDENTIALS, throttled_password_check
from modelgate.cabinet.auth import authenticate, require_session
from modelgate.cabinet.clock import now
from modelgate.cabinet.email_links import EmailLink, end_every_link_of, links_sent_since, send_link
from modelgate.cabinet.invitations_repository import end_pending_invitations
from modelgate.cabinet.mail import Letter, Mail, mail_of
from modelgate.cabinet.requests import (
    CabinetError,
    json_response,
    read_json_object,
    required_email,
    required_secret,
)
from modelgate.cabinet.services import CabinetServices, services_of
from modelgate.cabinet.users import (
    User,
    delete_user,
    mark_email_verified,
    set_email,
    user_by_email,
    user_in_organization,
)
from modelgate.domain.audit_log import Actor, record
from modelgate.storage.database import Executor

HOUR = 3600.0


def address_taken() -> CabinetError:
    """The one refusal an address can meet: a verified account holds it."""
    return CabinetError(409, "an account with this e-mail already exists")


async def release_address(tx: Executor, holder: User, at: float, reason: str) -> None:
    """Remove an unverified account whose address someone else just proved; its organization is told in its
    audit log (the organization and its other members stay)."""
    await delete_user(tx, holder.id)
    await end_every_link_of(tx, holder.id, at)
    await record(
        tx,
        holder.organization_id,
        "user.address_released",
        Actor("system", None, None),
        at,
        target_id=holder.id,
        details={"email": holder.email, "role": holder.role, "reason": reason},
    )


async def claim_address(tx: Executor, email: str, at: float, reason: str, *, keep: str | None = None) -> None:
    """A person just proved `email` (a link sent to it, or SSO of a verified domain): an unverified account
    holding it (other than the user `keep`) loses it; a verified one is a 409."""
    holder = await user_by_email(tx, email)
    if holder is None or holder.id == keep:
        return
    if holder.email_verified:
        raise address_taken()
    await release_address(tx, holder, at, reason)


async def link_budget_left(services: CabinetServices, email: str, requested_from: str | None) -> bool:
    """Whether another link may go to `email`, asked from `requested_from`, this hour."""
    sent = await links_sent_since(services.db, email, requested_from, now() - HOUR)
    return sent < services.config.cabinet.email_links_per_hour


def too_many_links() -> CabinetError:
    """429 for an authenticated caller over the hourly link budget."""
    return CabinetError(
        429,
        "too many e-mail links were requested this hour; try again later",
        headers={"Retry-After": "3600"},
    )


async def send_verification(
    tx: Executor, services: CabinetServices, mail: Mail, user: User, requested_from: str | None, at: float
) -> None:
    """Queue a link that verifies the user's current address."""
    letter = Letter(
        "verify",
        user.email,
        "Confirm your e-mail address",
        f"Follow this link to confirm that {user.email} is the address of your modelgate account:",
        user.organization_id,
    )
    await send_link(
        tx,
        mail,
        letter,
        user_id=user.id,
        at=at,
        ttl_seconds=services.config.cabinet.email_link_ttl_seconds,
        requested_from=requested_from,
    )


async def verify_address(tx: Executor, link: EmailLink, at: float) -> dict[str, object]:
    """A verification link was followed: its account's address is verified."""
    user = await user_by_email(tx, link.email)
    if user is None or user.id != link.user_id:
        # The account left, or its address changed since the link was sent.
        raise CabinetError(400, "this link is not valid: the account no longer has this address")
    await mark_email_verified(tx, user.id, at)
    await end_pending_invitations(tx, user.email, at)
    await record(
        tx,
        user.organization_id,
        "user.email_verified",
        Actor("user", user.id, user.email),
        at,
        target_id=user.id,
    )
    return {"email": user.email, "emailVerified": True}


async def change_address(tx: Executor, link: EmailLink, at: float) -> dict[str, object]:
    """An address-change link was followed: the account moves to the new, now verified, address."""
    user_id = link.user_id or ""
    organization_id = str(link.payload.get("organizationId", ""))
    user = await user_in_organization(tx, organization_id, user_id)
    if user is None:
        raise CabinetError(400, "this link is not valid: the account no longer exists")
    await claim_address(tx, link.email, at, "address_change", keep=user.id)
    await set_email(tx, user.id, link.email, at)
    await end_pending_invitations(tx, link.email, at)
    await record(
        tx,
        user.organization_id,
        "user.email_changed",
        Actor("user", user.id, link.email),
        at,
        target_id=user.id,
        details={"from": user.email, "to": link.email},
    )
    return {"email": link.email, "emailVerified": True}


async def resend_verification(request: web.Request) -> web.Response:
    """POST /auth/verify-email/send (session) → 202 {delivery}: a new link to the caller's own address."""
    services = services_of(request)
    principal = await authenticate(request)
    require_session(principal, "verifying an address")
    user = await user_in_organization(services.db, principal.organization_id, principal.user_id or "")
    if user is None:
        raise CabinetError(401, "invalid or expired session token")
    if user.email_verified:
        raise CabinetError(409, f"{user.email} is already verified")
    if not await link_budget_left(services, user.email, request.remote):
        raise too_many_links()
    mail = mail_of(request)
    async with services.db.transaction() as tx:
        await send_verification(tx, services, mail, user, request.remote, now())
    mail.sent()
    return json_response({"email": user.email, "delivery": mail.delivery}, status=202)


async def request_address_change(request: web.Request) -> web.Response:
    """POST /auth/email {newEmail, currentPassword} (session) → 202 {email, delivery}: a link goes to the new
    address; the account moves there only when it is followed."""
    services = services_of(request)
    principal = await authenticate(request)
    require_session(principal, "changing an address")
    body = await read_json_object(request)
    new_email = required_email(body, "newEmail")
    user = await user_in_organization(services.db, principal.organization_id, principal.user_id or "")
    if user is None:
        raise CabinetError(401, "invalid or expired session token")
    if user.password_hash is not None:
        current = required_secret(body, "currentPassword")
        if not await throttled_password_check(request, user.email, user.password_hash, current):
            raise CabinetError(400, f"currentPassword is incorrect ({BAD_CREDENTIALS})")
    if new_email == user.email:
        raise CabinetError(400, "newEmail is the account's address already")
    holder = await user_by_email(services.db, new_email)
    if holder is not None and holder.email_verified:
        raise address_taken()
    if not await link_budget_left(services, new_email, request.remote):
        raise too_many_links()
    mail = mail_of(request)
    at = now()
    async with services.db.transaction() as tx:
        letter = Letter(
            "change",
            new_email,
            "Confirm your new e-mail address",
            f"Follow this link to make {new_email} the address of the modelgate account {user.email}:",
            user.organization_id,
        )
        await send_link(
            tx,
            mail,
            letter,
            user_id=user.id,
            at=at,
            ttl_seconds=services.config.cabinet.email_link_ttl_seconds,
            requested_from=request.remote,
            payload={"organizationId": user.organization_id},
        )
        await record(
            tx,
            user.organization_id,
            "user.email_change_requested",
            Actor("user", user.id, user.email),
            at,
            target_id=user.id,
            details={"to": new_email},
        )
    mail.sent()
    return json_response({"email": new_email, "delivery": mail.delivery}, status=202)
