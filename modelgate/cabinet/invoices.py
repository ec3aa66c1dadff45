"""Invoices of an organization as the cabinet lists them (stored by
`modelgate/cabinet/invoices_repository.py`)."""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.invoice_payment import invoice_with_payment
from modelgate.cabinet.invoices_repository import invoices_of
from modelgate.cabinet.requests import json_response
from modelgate.cabinet.services import services_of


async def list_invoices(request: web.Request) -> web.Response:
    """GET /invoices → the caller's organization's invoices, newest first (any role); an open one that owes
    money says how to pay it (`payment`)."""
    principal = await authenticate(request)
    services = services_of(request)
    invoices = await invoices_of(services.db, principal.organization_id)
    billing = services.config.billing
    return json_response({"invoices": [invoice_with_payment(billing, invoice) for invoice in invoices]})
