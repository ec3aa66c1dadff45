"""Registration: a new organization, its owner, the first invoice of its plan and a session, at once."""

from __future__ import annotations

from aiohttp import web

from cabinet.audit import Actor, record
from cabinet.clock import now
from cabinet.invoices import open_plan_invoice
from cabinet.organizations import insert_organization
from cabinet.passwords import hash_password, password_policy_violation
from cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    read_json_object,
    required_email,
    required_secret,
    required_text,
)
from cabinet.services import services_of
from cabinet.storage import IntegrityViolation
from cabinet.users import insert_user, user_by_email


def _email_taken() -> CabinetError:
    return CabinetError(409, "an account with this e-mail already exists")


async def register(request: web.Request) -> web.Response:
    """POST /auth/register {legalName, email, password, planCode} → 201 {token, email}."""
    services = services_of(request)
    body = await read_json_object(request)
    legal_name = required_text(body, "legalName")
    email = required_email(body, "email")
    password = required_secret(body, "password")
    if problem := password_policy_violation(password, email):
        raise bad_request(problem)
    plan_code = body.get("planCode")
    if plan_code is None or plan_code == "":
        raise bad_request("planCode is required")
    if not isinstance(plan_code, str):
        raise bad_request("planCode must be a string")
    plan = services.config.plan(plan_code)
    if plan is None:
        known = ", ".join(p.code for p in services.config.plans)
        raise bad_request(f"planCode must be one of: {known}")

    if await user_by_email(services.db, email) is not None:
        raise _email_taken()
    password_hash = await hash_password(password)
    at = now()
    try:
        async with services.db.transaction() as tx:
            org = await insert_organization(tx, legal_name, plan.code, at)
            owner = await insert_user(tx, org.id, email, password_hash, "owner", at)
            invoice = await open_plan_invoice(tx, org.id, plan, at)
            token = await services.create_session(tx, owner.id, org.id)
            await record(
                tx,
                org.id,
                "auth.registered",
                Actor("user", owner.id, owner.email),
                at,
                target_id=org.id,
                details={"planCode": plan.code, "invoiceId": invoice.id},
            )
    except IntegrityViolation as exc:
        # Another registration took the e-mail between our check and the insert.
        raise _email_taken() from exc
    return json_response({"token": token, "email": email}, status=201)
