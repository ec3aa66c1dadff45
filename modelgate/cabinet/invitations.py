"""Invitations: an owner or admin invites an e-mail with a role; the single-use, expiring token (stored only
as a hash) creates the account in the inviting organization (or logs in an existing member of it).

The token goes to the invited address only — by e-mail, or through the operator without `[email]` — never
to the inviter: so accepting it proves the address (docs/cabinet.md, Verified addresses)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiohttp import web

from modelgate.cabinet.account import BAD_CREDENTIALS, throttled_password_check
from modelgate.cabinet.addresses import claim_address
from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import now
from modelgate.cabinet.invitation_delivery import InvitationDelivery
from modelgate.cabinet.invitations_repository import (
    Invitation,
    consume,
    end_pending_invitations,
    insert_invitation,
    invitation_by_token_hash,
    invitation_in_organization,
    invitations_of,
    mark_revoked,
    pending_to,
)
from modelgate.cabinet.mail import Letter, mail_of
from modelgate.cabinet.mail_outbox import withdraw_mail
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.passwords import hash_password, password_policy_violation
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    path_id,
    read_json_object,
    required_choice,
    required_email,
    required_secret,
)
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import (
    ADMIN_ROLES,
    ROLES,
    User,
    insert_user,
    mark_email_verified,
    user_by_email,
)
from modelgate.cabinet.web_security import signed_in_response
from modelgate.domain.audit_log import Actor, record
from modelgate.domain.organizations import organization_by_id
from modelgate.domain.tokens import hash_token, new_id, new_opaque_token
from modelgate.storage import IntegrityViolation
from modelgate.storage.database import Executor

DELIVERY = web.AppKey("cabinet_invitation_delivery", InvitationDelivery)


def _not_found() -> CabinetError:
    return CabinetError(404, "invitation not found")


def _account_conflict(existing: User, organization_id: str) -> CabinetError:
    if existing.organization_id == organization_id:
        return CabinetError(409, f"{existing.email} is already a member of the organization")
    return CabinetError(409, "this e-mail already has an account in another organization")


async def create_invitation(request: web.Request) -> web.Response:
    """POST /invitations {email, role} (owner/admin) → 201 the invitation and its `delivery` (`email` or
    `operator`); the token goes only to the address."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    body = await read_json_object(request)
    email = required_email(body, "email")
    role = required_choice(body, "role", ROLES)
    if role == "owner" and principal.role != "owner":
        raise CabinetError(403, "only an owner can invite an owner")
    existing = await user_by_email(services.db, email)
    if existing is not None and (
        existing.email_verified or existing.organization_id == principal.organization_id
    ):
        # An unverified account elsewhere holds nothing: accepting this invitation proves the address.
        raise _account_conflict(existing, principal.organization_id)

    token = new_opaque_token()
    at = now()
    invitation = Invitation(
        new_id("invite"),
        principal.organization_id,
        email,
        role,
        "pending",
        principal.user_id or principal.key_id,
        at,
        at + services.config.cabinet.invitation_ttl_seconds,
        None,
        None,
        principal.email or None,
    )
    mail = mail_of(request)
    async with services.db.transaction() as tx:
        # The organization's row lock serialises invitations of one organization (one pending per address).
        org = await require_organization(tx, principal.organization_id, lock=True)
        pending = await pending_to(tx, org.id, email)
        if pending is not None and pending.expires_at > at:
            raise CabinetError(
                409, f"{email} already has a pending invitation ({pending.id}); revoke it to invite again"
            )
        if pending is not None:  # expired: this one takes its place
            await mark_revoked(tx, pending.id, at)
        await insert_invitation(tx, invitation, hash_token(token))
        await record(
            tx,
            org.id,
            "invitation.created",
            actor_of(principal),
            at,
            target_id=invitation.id,
            details={"email": email, "role": role},
        )
        await mail.queue(tx, _letter(invitation, org.legal_name), token, at, invitation.expires_at)
    mail.sent()
    request.app[DELIVERY].deliver(
        {
            "event": "invitation.created",
            "organization": {"id": org.id, "legalName": org.legal_name},
            "invitation": {**invitation.to_json(at), "token": token},
        }
    )
    # No token: it went to the address (or to the operator), never to the inviter.
    return json_response({**invitation.to_json(at), "delivery": mail.delivery}, status=201)


def _letter(invitation: Invitation, legal_name: str) -> Letter:
    inviter = invitation.invited_by or "An administrator"
    return Letter(
        "invitation",
        invitation.email,
        f"You are invited to join {legal_name} on modelgate",
        f"{inviter} invited you to join the organization {legal_name} on modelgate as {invitation.role}."
        " Follow this link to accept:",
        invitation.organization_id,
    )


async def list_invitations(request: web.Request) -> web.Response:
    """GET /invitations (owner/admin) → the organization's invitations, newest first, without tokens."""
    principal = await authenticate(request, roles=ADMIN_ROLES)
    invitations = await invitations_of(services_of(request).db, principal.organization_id)
    at = now()
    return json_response({"invitations": [i.to_json(at) for i in invitations]})


async def revoke_invitation(request: web.Request) -> web.Response:
    """POST /invitations/{id}/revoke (owner/admin) → the invitation, now `revoked`."""
    services = services_of(request)
    principal = await authenticate(request, roles=ADMIN_ROLES)
    invitation_id = path_id(request, "id", unknown=_not_found())
    at = now()
    async with services.db.transaction() as tx:
        invitation = await invitation_in_organization(tx, principal.organization_id, invitation_id)
        if invitation is None:
            raise _not_found()
        if invitation.status != "pending":
            raise bad_request(f"invitation already {invitation.status}")
        await mark_revoked(tx, invitation.id, at)
        # Its link stops working: an unsent message with it is not sent (the operator no longer lists it).
        await withdraw_mail(tx, "invitation", invitation.email, invitation.organization_id)
        await record(
            tx,
            principal.organization_id,
            "invitation.revoked",
            actor_of(principal),
            at,
            target_id=invitation.id,
            details={"email": invitation.email, "role": invitation.role},
        )
    return json_response(replace(invitation, status="revoked", revoked_at=at).to_json(at))


async def _pending_invitation(ex: Executor, token: str, at: float) -> Invitation:
    invitation = await invitation_by_token_hash(ex, hash_token(token))
    if invitation is None:
        raise bad_request("invitation token is not valid")
    status = invitation.status_at(at)
    if status == "accepted":
        raise bad_request("invitation has already been used")
    if status == "revoked":
        raise bad_request("invitation has been revoked")
    if status == "expired":
        raise bad_request("invitation has expired")
    return invitation


def _optional_password(body: dict[str, Any]) -> str | None:
    """The `password` of an accept request: optional, but a string when it is there."""
    return required_secret(body, "password") if body.get("password") not in (None, "") else None


async def accept_invitation(request: web.Request) -> web.Response:
    """POST /invitations/accept {token, password?} → 200 {token, email, passwordSet}, a session in the
    inviting org.

    The token proves the e-mail: an existing member needs no password, and a new user may set theirs
    later (POST /auth/password) or sign in through single sign-on. A password that is sent is set for a
    new user and checked for an existing member.
    """
    services = services_of(request)
    body = await read_json_object(request)
    invitation_token = required_secret(body, "token")
    password = _optional_password(body)
    invitation = await _pending_invitation(services.db, invitation_token, now())

    existing = await user_by_email(services.db, invitation.email)
    if existing is not None and existing.organization_id != invitation.organization_id:
        if existing.email_verified:
            raise _account_conflict(existing, invitation.organization_id)
        existing = None  # an unverified account elsewhere: it loses the address this token proves
    password_hash: str | None = None
    if existing is not None:
        # Already a member (another invitation was accepted first): the token signs them in; a password
        # that is sent anyway is checked (throttled like a login), never ignored.
        if password is not None and not await throttled_password_check(
            request, existing.email, existing.password_hash, password
        ):
            raise CabinetError(401, BAD_CREDENTIALS)
    elif password is not None:
        if problem := password_policy_violation(password, invitation.email):
            raise bad_request(problem)
        password_hash = await hash_password(password)

    at = now()
    try:
        async with services.db.transaction() as tx:
            if not await consume(tx, invitation.id, at):
                raise bad_request("invitation has already been used")
            if existing is None:
                await claim_address(tx, invitation.email, at, "invitation")
                user = await insert_user(
                    tx,
                    invitation.organization_id,
                    invitation.email,
                    password_hash,
                    invitation.role,
                    at,
                    verified=True,
                )
            else:
                # The token reached the address: it is the member's, verified.
                await mark_email_verified(tx, existing.id, at)
                user = existing
            await end_pending_invitations(tx, invitation.email, at)
            session_token = await services.create_session(tx, user.id, user.organization_id)
            await record(
                tx,
                invitation.organization_id,
                "invitation.accepted",
                Actor("user", user.id, user.email),
                at,
                target_id=invitation.id,
                details={"userId": user.id, "role": user.role, "newAccount": existing is None},
            )
    except IntegrityViolation as exc:
        # The e-mail got an account (registration elsewhere) between our check and the insert.
        raise CabinetError(409, "this e-mail already has an account in another organization") from exc
    return signed_in_response(
        request,
        services.config,
        {"token": session_token, "email": user.email, "passwordSet": user.password_hash is not None},
        session_token,
    )


async def invitation_details(request: web.Request) -> web.Response:
    """POST /invitations/details {token} → what the accept page shows before accepting: the address, the
    organization, the role, who invited and until when (400 for a used, revoked, expired or unknown token)."""
    services = services_of(request)
    body = await read_json_object(request)
    at = now()
    invitation = await _pending_invitation(services.db, required_secret(body, "token"), at)
    org = await organization_by_id(services.db, invitation.organization_id)
    return json_response(
        {
            "email": invitation.email,
            "role": invitation.role,
            "organization": {"legalName": org.legal_name if org else None},
            "invitedBy": invitation.invited_by,
            "expiresAt": invitation.to_json(at)["expiresAt"],
        }
    )
