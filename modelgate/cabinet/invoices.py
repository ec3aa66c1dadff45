"""Invoices of an organization as the cabinet lists them (stored by
`modelgate/cabinet/invoices_repository.py`)."""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.invoices_repository import invoices_of
from modelgate.cabinet.requests import json_response
from modelgate.cabinet.services import services_of


async def list_invoices(request: web.Request) -> web.Response:
    """GET /invoices → the caller's organization's invoices, newest first (any role)."""
    principal = await authenticate(request)
    invoices = await invoices_of(services_of(request).db, principal.organization_id)
    return json_response({"invoices": [invoice.to_json() for invoice in invoices]})
