"""The operator API: marking invoices paid, topping up and adjusting balances, assigning plans, inviting
organizations to register, reading any organization's invoices, and the mail waiting in the outbox.

Guarded by `server.operator_token` (Bearer, compared in constant time); session tokens and keys of the
cabinet are not operator tokens. Without a configured token the operator API answers 404 as if absent.
The same results are what `modelgate billing … --url` prints.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from aiohttp import web

from modelgate.cabinet.auth import bearer_token
from modelgate.cabinet.billing import (
    adjust_balance,
    announce_balance_event,
    announce_plan_change,
    change_plan,
    mark_invoice_paid,
    organization_not_found,
    top_up,
)
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.invoices_repository import Invoice, invoices_of
from modelgate.cabinet.mail_outbox import waiting_mail
from modelgate.cabinet.registration_invitations import invite_organization
from modelgate.cabinet.requests import (
    CabinetError,
    bad_request,
    json_response,
    path_id,
    read_json_object,
    required_email,
)
from modelgate.cabinet.services import services_of
from modelgate.config import Config
from modelgate.domain.allowance import grant_allowance
from modelgate.domain.organizations import billing_state, organization_by_id
from modelgate.storage.database import Executor


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def require_operator(request: web.Request) -> None:
    """Pass only a request carrying the configured operator token: 404 when none is configured, else 401."""
    expected = services_of(request).config.server.operator_token
    if not expected:
        raise CabinetError(404, "not found")
    presented = bearer_token(request.headers.get("Authorization"))
    # Digests have equal length, so the comparison time says nothing about the token.
    if not hmac.compare_digest(_digest(presented), _digest(expected)):
        raise CabinetError(401, "invalid operator token", headers={"WWW-Authenticate": "Bearer"})


def payment_json(
    config: Config, invoice: Invoice, credited_micros: int, balance_micros: int
) -> dict[str, Any]:
    """The answer of mark-paid and top-up: the invoice, what was credited and the balance after it."""
    return {
        "organizationId": invoice.organization_id,
        "invoice": invoice.to_json(),
        "creditedMicros": credited_micros,
        "balanceMicros": balance_micros,
        "currency": config.billing.currency,
    }


async def organization_invoices_json(ex: Executor, config: Config, organization_id: str) -> dict[str, Any]:
    """An organization's billing state and all its invoices, newest first; 404 when it does not exist."""
    org = await organization_by_id(ex, organization_id)
    state = await billing_state(ex, organization_id)
    if org is None or state is None:
        raise organization_not_found()
    return {
        "organizationId": org.id,
        "legalName": org.legal_name,
        "planCode": org.plan_code,
        "balanceMicros": state.balance_micros,
        "activated": state.activated,
        "activatedAt": isoformat(state.activated_at),
        "currency": config.billing.currency,
        "invoices": [invoice.to_json() for invoice in await invoices_of(ex, organization_id)],
    }


async def _balance(ex: Executor, organization_id: str) -> int:
    state = await billing_state(ex, organization_id)
    return state.balance_micros if state else 0


def _only_fields(body: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise bad_request(f"unknown field: {unknown[0]}")


async def operator_mark_paid(request: web.Request) -> web.Response:
    """POST /operator/invoices/{id}/mark-paid → the paid invoice and the new balance."""
    require_operator(request)
    services = services_of(request)
    invoice_id = path_id(request, "id", unknown=CabinetError(404, "invoice not found"))
    at = now()
    async with services.db.transaction() as tx:
        invoice, event = await mark_invoice_paid(tx, invoice_id, at)
        # Activation grants the plan's monthly allowance (once a month, whatever activates).
        allowance = await grant_allowance(tx, services.config, invoice.organization_id, at)
        balance = await _balance(tx, invoice.organization_id)
    await announce_balance_event(services, event)
    await announce_balance_event(services, allowance)
    return json_response(payment_json(services.config, invoice, invoice.amount_micros, balance))


async def operator_top_up(request: web.Request) -> web.Response:
    """POST /operator/organizations/{id}/top-up {amountMicros} → 201 the top-up invoice and the balance."""
    require_operator(request)
    services = services_of(request)
    organization_id = path_id(request, "id", unknown=organization_not_found())
    body = await read_json_object(request)
    _only_fields(body, {"amountMicros"})
    if "amountMicros" not in body:
        raise bad_request("amountMicros is required")
    at = now()
    async with services.db.transaction() as tx:
        invoice, event = await top_up(tx, organization_id, body["amountMicros"], at)
        allowance = await grant_allowance(tx, services.config, organization_id, at)
        balance = await _balance(tx, organization_id)
    await announce_balance_event(services, event)
    await announce_balance_event(services, allowance)
    return json_response(payment_json(services.config, invoice, invoice.amount_micros, balance), status=201)


async def operator_adjust(request: web.Request) -> web.Response:
    """POST /operator/organizations/{id}/adjust {kind, amountMicros, reason} → 201 the balance event."""
    require_operator(request)
    services = services_of(request)
    organization_id = path_id(request, "id", unknown=organization_not_found())
    body = await read_json_object(request)
    _only_fields(body, {"kind", "amountMicros", "reason"})
    for field in ("kind", "amountMicros", "reason"):
        if field not in body:
            raise bad_request(f"{field} is required")
    async with services.db.transaction() as tx:
        adjustment = await adjust_balance(
            tx, organization_id, body["kind"], body["amountMicros"], body["reason"], now()
        )
    await announce_balance_event(services, adjustment.event)
    return json_response(adjustment.to_json(services.config.billing.currency), status=201)


async def operator_set_plan(request: web.Request) -> web.Response:
    """POST /operator/organizations/{id}/plan {planCode} → the organization's plan, changed at once in
    every running gateway."""
    require_operator(request)
    services = services_of(request)
    organization_id = path_id(request, "id", unknown=organization_not_found())
    body = await read_json_object(request)
    _only_fields(body, {"planCode"})
    at = now()
    async with services.db.transaction() as tx:
        previous, plan = await change_plan(tx, services.config, organization_id, body.get("planCode"), at)
        # An activated organization moved onto a plan with an allowance gets this month's at once.
        allowance = await grant_allowance(tx, services.config, organization_id, at)
    await announce_plan_change(services, organization_id)
    await announce_balance_event(services, allowance)
    return json_response(
        {"organizationId": organization_id, "planCode": plan.code, "previousPlanCode": previous}
    )


async def operator_invite_organization(request: web.Request) -> web.Response:
    """POST /operator/registration-invitations {email, planCode} → 201 the invitation with its token,
    shown only here."""
    require_operator(request)
    services = services_of(request)
    body = await read_json_object(request)
    _only_fields(body, {"email", "planCode"})
    invitation, token = await invite_organization(
        services.db, services.config, required_email(body, "email"), body.get("planCode"), now()
    )
    return json_response({**invitation, "token": token}, status=201)


async def operator_invoices(request: web.Request) -> web.Response:
    """GET /operator/organizations/{id}/invoices → the organization's billing state and invoices."""
    require_operator(request)
    services = services_of(request)
    organization_id = path_id(request, "id", unknown=organization_not_found())
    return json_response(await organization_invoices_json(services.db, services.config, organization_id))


async def operator_mail(request: web.Request) -> web.Response:
    """GET /operator/mail → the messages not yet sent whose link still works, oldest first, with their links
    (without `[email]` the operator passes them on; with it, a message here is waiting for a retry: see
    `lastError`). What `modelgate mail pending` prints."""
    require_operator(request)
    waiting = await waiting_mail(services_of(request).db, now())
    return json_response({"mail": [m.to_json(with_link=True) for m in waiting]})
