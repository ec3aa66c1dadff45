"""GET /api/overview: everything the cabinet's home page shows, in one read (never a secret)."""

from __future__ import annotations

from aiohttp import web

from modelgate.cabinet.api_keys import api_key_json
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.billing import billing_overview
from modelgate.cabinet.clock import now
from modelgate.cabinet.organizations import organization_json, require_organization
from modelgate.cabinet.requests import json_response
from modelgate.cabinet.services import services_of
from modelgate.cabinet.systems_repository import systems_of
from modelgate.cabinet.users import users_of
from modelgate.domain.api_keys import api_keys_of


async def overview(request: web.Request) -> web.Response:
    """The organization, the caller, members, `apiKeys` (without secrets), systems and billing."""
    services = services_of(request)
    principal = await authenticate(request)
    db = services.db
    org = await require_organization(db, principal.organization_id)
    return json_response(
        {
            "organization": organization_json(org),
            "user": {
                "id": principal.user_id,
                "email": principal.email,
                "role": principal.role,
                "kind": principal.kind,
            },
            "members": [m.to_json() for m in await users_of(db, org.id)],
            "apiKeys": [api_key_json(k) for k in await api_keys_of(db, org.id)],
            "systems": [s.to_json() for s in await systems_of(db, org.id)],
            "billing": await billing_overview(db, services.config, org, now()),
        }
    )
