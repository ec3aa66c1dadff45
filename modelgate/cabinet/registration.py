"""Registration: a new organization, its owner, the first invoice of its plan and a session, at once (a
plan without a fee opens a 0.00 invoice that is paid at once, so the organization starts active).

`[cabinet] registration` decides who may register: anyone (`open`), holders of an operator's registration
invitation (`invite_only`), or nobody (`closed`; member invitations of existing organizations still work).
Self-registration may choose only plans marked `self_service`; an invitation brings its own plan.
"""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.addresses import (
    address_taken,
    claim_address,
    link_budget_left,
    send_verification,
    too_many_links,
)
from modelgate.cabinet.billing import settle_free_invoice
from modelgate.cabinet.clock import now
from modelgate.cabinet.email_links import EmailLink, send_link
from modelgate.cabinet.invitations_repository import end_pending_invitations
from modelgate.cabinet.invoices_repository import open_plan_invoice
from modelgate.cabinet.mail import Letter, Mail, mail_of
from modelgate.cabinet.passwords import hash_password, password_policy_violation
from modelgate.cabinet.registration_invitations import (
    RegistrationInvitation,
    usable_registration_invitation,
    use_registration_invitation,
)
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    read_json_object,
    required_email,
    required_secret,
    required_text,
)
from modelgate.cabinet.services import CabinetServices, services_of
from modelgate.cabinet.users import insert_user, user_by_email
from modelgate.cabinet.web_security import signed_in_response
from modelgate.config import PlanConfig
from modelgate.domain.audit_log import Actor, record
from modelgate.domain.organizations import insert_organization
from modelgate.storage import IntegrityViolation
from modelgate.storage.database import Executor


def _known_plan(services: CabinetServices, plan_code: str) -> PlanConfig:
    plan = services.config.plan(plan_code)
    if plan is None:
        known = ", ".join(p.code for p in services.config.plans)
        raise bad_request(f"planCode must be one of: {known}")
    return plan


async def _invitation_of(
    services: CabinetServices, body: dict, email: str, at: float
) -> RegistrationInvitation | None:
    """The registration invitation the body presents, None without one; 403 when the mode needs one or the
    token is not usable."""
    token = body.get("invitationToken")
    if token is None or token == "":
        if services.config.cabinet.registration == "invite_only":
            raise CabinetError(403, "registration needs an invitation: invitationToken is required")
        return None
    if not isinstance(token, str):
        raise bad_request("invitationToken must be a string")
    return await usable_registration_invitation(services.db, token, email, at)


def _chosen_plan(
    services: CabinetServices, body: dict, invitation: RegistrationInvitation | None
) -> PlanConfig:
    plan_code = body.get("planCode")
    if plan_code is not None and not isinstance(plan_code, str):
        raise bad_request("planCode must be a string")
    if invitation is not None:
        # The operator chose the plan; a differing one in the body is a mistake, not a choice.
        if plan_code and plan_code != invitation.plan_code:
            raise bad_request(f"planCode must be {invitation.plan_code!r}, the plan of the invitation")
        return _known_plan(services, invitation.plan_code)
    if not plan_code:
        raise bad_request("planCode is required")
    plan = _known_plan(services, plan_code)
    if not plan.self_service:
        raise bad_request(
            f"planCode {plan.code!r} is not open for self-registration; the operator assigns it (ask for a"
            " registration invitation)"
        )
    return plan


async def register(request: web.Request) -> web.Response:
    """POST /auth/register {legalName, email, password, planCode, invitationToken?} → 201 {token, email} (a
    verification link goes to the address), or 202 {email, delivery, pending} when an unverified account
    holds the address: the registration then completes when the link sent to it is followed."""
    services = services_of(request)
    body = await read_json_object(request)
    if services.config.cabinet.registration == "closed":
        # Member invitations of existing organizations still work: they go through /invitations/accept.
        raise CabinetError(403, "registration is closed")
    legal_name = required_text(body, "legalName")
    email = required_email(body, "email")
    password = required_secret(body, "password")
    if problem := password_policy_violation(password, email):
        raise bad_request(problem)
    invitation = await _invitation_of(services, body, email, now())
    plan = _chosen_plan(services, body, invitation)

    holder = await user_by_email(services.db, email)
    if holder is not None and holder.email_verified:
        raise address_taken()
    password_hash = await hash_password(password)
    if holder is not None and invitation is None:
        # An unverified account holds the address: it holds nothing against the person who proves it.
        return await _wait_for_address(request, legal_name, email, password_hash, plan)
    at = now()
    mail = mail_of(request)
    try:
        async with services.db.transaction() as tx:
            if invitation is not None:
                # The operator's invitation went to the address: it proves it (an unverified holder loses it).
                await claim_address(tx, email, at, "registration")
            # A registration is not a throttled link request: its verification link does not count against
            # the client address's hourly budget (registrations behind one address would use up its resets).
            token, _ = await _create_organization(
                tx, services, mail, legal_name, email, password_hash, plan, invitation, at, None
            )
    except IntegrityViolation as exc:
        # Another registration took the e-mail between our check and the insert.
        raise address_taken() from exc
    mail.sent()
    # The spec's auth response, {token, email}: the session says whether the address is verified, and
    # sign-in-options where the cabinet's links go.
    return signed_in_response(request, services.config, {"token": token, "email": email}, token, status=201)


async def _create_organization(
    tx: Executor,
    services: CabinetServices,
    mail: Mail,
    legal_name: str,
    email: str,
    password_hash: str,
    plan: PlanConfig,
    invitation: RegistrationInvitation | None,
    at: float,
    requested_from: str | None,
    *,
    verified: bool = False,
) -> tuple[str, str]:
    """The organization, its owner, its first invoice, a session and the audit entry; a verification link
    unless the address is proven already. Returns (session token, organization id)."""
    org = await insert_organization(tx, legal_name, plan.code, at)
    if invitation is not None:
        await use_registration_invitation(tx, invitation, org.id, at)
    owner = await insert_user(
        tx, org.id, email, password_hash, "owner", at, verified=verified or invitation is not None
    )
    await end_pending_invitations(tx, email, at)
    invoice = await open_plan_invoice(tx, org.id, plan, at)
    actor = Actor("user", owner.id, owner.email)
    # A new organization has no API key yet, so no gateway holds its balance: the stored events are all
    # a gateway needs (it reads them when the first key is used, or follows them within a second).
    await settle_free_invoice(tx, services.config, invoice, actor, at)
    token = await services.create_session(tx, owner.id, org.id)
    await record(
        tx,
        org.id,
        "auth.registered",
        actor,
        at,
        target_id=org.id,
        details={
            "planCode": plan.code,
            "invoiceId": invoice.id,
            **({"invitationId": invitation.id} if invitation else {}),
        },
    )
    if not owner.email_verified:
        await send_verification(tx, services, mail, owner, requested_from, at)
    return token, org.id


async def _wait_for_address(
    request: web.Request, legal_name: str, email: str, password_hash: str, plan: PlanConfig
) -> web.Response:
    """202: the registration waits in a link sent to the address; following it completes the registration
    and removes the unverified account that held the address."""
    services = services_of(request)
    if not await link_budget_left(services, email, request.remote):
        raise too_many_links()
    mail = mail_of(request)
    at = now()
    async with services.db.transaction() as tx:
        letter = Letter(
            "register",
            email,
            "Confirm your e-mail address to finish registering",
            f"Follow this link to confirm {email} and finish registering {legal_name} on modelgate:",
        )
        await send_link(
            tx,
            mail,
            letter,
            user_id=None,
            at=at,
            ttl_seconds=services.config.cabinet.email_link_ttl_seconds,
            requested_from=request.remote,
            payload={"legalName": legal_name, "planCode": plan.code, "passwordHash": password_hash},
        )
    mail.sent()
    return json_response(
        {
            "email": email,
            "delivery": mail.delivery,
            "pending": "the address must be confirmed: follow the link sent to it to finish registering",
        },
        status=202,
    )


async def complete_waiting_registration(
    request: web.Request, tx: Executor, link: EmailLink, at: float
) -> web.Response:
    """Follow a registration's link (inside its transaction): the address is proven, an unverified account
    holding it loses it, and the organization is created as registered (201, signed in)."""
    services = services_of(request)
    payload = link.payload
    plan = services.config.plan(str(payload.get("planCode", "")))
    if plan is None:
        raise bad_request("the plan of this registration no longer exists; register again")
    await claim_address(tx, link.email, at, "registration")
    token, _ = await _create_organization(
        tx,
        services,
        mail_of(request),
        str(payload.get("legalName", "")),
        link.email,
        str(payload.get("passwordHash", "")),
        plan,
        None,
        at,
        None,  # verified already: no link is sent
        verified=True,
    )
    return signed_in_response(
        request, services.config, {"token": token, "email": link.email}, token, status=201
    )
