"""Registration: a new organization, its owner, the first invoice of its plan and a session, at once.

`[cabinet] registration` decides who may register: anyone (`open`), holders of an operator's registration
invitation (`invite_only`), or nobody (`closed`; member invitations of existing organizations still work).
Self-registration may choose only plans marked `self_service`; an invitation brings its own plan.
"""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.clock import now
from modelgate.cabinet.invitations_repository import end_pending_invitations
from modelgate.cabinet.invoices_repository import open_plan_invoice
from modelgate.cabinet.passwords import hash_password, password_policy_violation
from modelgate.cabinet.registration_invitations import (
    RegistrationInvitation,
    usable_registration_invitation,
    use_registration_invitation,
)
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
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


def _email_taken() -> CabinetError:
    return CabinetError(409, "an account with this e-mail already exists")


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
    """POST /auth/register {legalName, email, password, planCode, invitationToken?} → 201 {token, email}."""
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

    if await user_by_email(services.db, email) is not None:
        raise _email_taken()
    password_hash = await hash_password(password)
    at = now()
    try:
        async with services.db.transaction() as tx:
            org = await insert_organization(tx, legal_name, plan.code, at)
            if invitation is not None:
                await use_registration_invitation(tx, invitation, org.id, at)
            owner = await insert_user(tx, org.id, email, password_hash, "owner", at)
            await end_pending_invitations(tx, email, at)
            invoice = await open_plan_invoice(tx, org.id, plan, at)
            token = await services.create_session(tx, owner.id, org.id)
            await record(
                tx,
                org.id,
                "auth.registered",
                Actor("user", owner.id, owner.email),
                at,
                target_id=org.id,
                details={
                    "planCode": plan.code,
                    "invoiceId": invoice.id,
                    **({"invitationId": invitation.id} if invitation else {}),
                },
            )
    except IntegrityViolation as exc:
        # Another registration took the e-mail between our check and the insert.
        raise _email_taken() from exc
    return signed_in_response(request, services.config, {"token": token, "email": email}, token, status=201)
