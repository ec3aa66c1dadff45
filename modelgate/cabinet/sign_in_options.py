"""GET /auth/sign-in-options: what the web cabinet's sign-in and registration pages show before anyone is
signed in — the gateway's name and version, the registration mode, the self-service plans, and the single
sign-on providers for the e-mail being typed.

Identity providers belong to organizations, so they are never listed all at once (that would name every
tenant's provider to anyone). A provider is shown only for an e-mail of one of its allowed domains, the
usual "home realm discovery" of multi-tenant sign-in pages: it tells a visitor which provider serves their
own domain, and nothing about other domains.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from aiohttp import web

from modelgate.cabinet.oidc.providers import providers_for_domain
from modelgate.cabinet.oidc.urls import login_url
from modelgate.cabinet.requests import bad_request, json_response, normalize_email
from modelgate.cabinet.services import services_of
from modelgate.domain.money import to_micros

QUERY_PARAMETERS = ("email",)


def gateway_version() -> str:
    """The version of the installed distribution ("unknown" when run from a tree that is not installed)."""
    try:
        return metadata.version("modelgate")
    except metadata.PackageNotFoundError:
        return "unknown"


def _email_domain(request: web.Request) -> str | None:
    for name in request.query:
        if name not in QUERY_PARAMETERS:
            raise bad_request(f"unknown query parameter: {name}; use {', '.join(QUERY_PARAMETERS)}")
    raw = request.query.get("email", "")
    if not raw.strip():
        return None
    email = normalize_email(raw)
    if email is None:
        raise bad_request("email must be a valid e-mail address")
    return email.rpartition("@")[2]


async def sign_in_options(request: web.Request) -> web.Response:
    """GET /auth/sign-in-options?email= (public) → {name, version, registration, currency, plans,
    providers, emailDelivery}."""
    services = services_of(request)
    config = services.config
    domain = _email_domain(request)
    providers: list[dict[str, Any]] = []
    # Without a public URL there is no redirect URI, so no provider could complete a sign-in.
    if domain is not None and config.server.public_url:
        providers = [
            {"id": provider_id, "name": name, "loginUrl": login_url(config, provider_id)}
            for provider_id, name in await providers_for_domain(services.db, domain)
        ]
    return json_response(
        {
            "name": "modelgate",
            "currency": config.billing.currency,
            "version": gateway_version(),
            "registration": config.cabinet.registration,
            "plans": [
                {"code": plan.code, "name": plan.name, "monthlyFeeMicros": to_micros(plan.monthly_fee)}
                for plan in config.plans
                if plan.self_service
            ],
            "providers": providers,
            # Where the links of invitations, verification and reset go: `email` by SMTP, `operator`
            # when the gateway sends no mail (the cabinet tells the user to ask the operator).
            "emailDelivery": "email" if config.email is not None else "operator",
        }
    )
