"""The cabinet (management API) as an aiohttp app: the route table and the error middleware.

The host mounts it with `root.add_subapp("/api", build_cabinet_app(services))`.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from cabinet import (
    account,
    api_keys,
    audit,
    invitations,
    management_keys,
    members,
    overview,
    registration,
    systems,
)
from cabinet.invitation_delivery import InvitationDelivery
from cabinet.openapi import openapi_handler
from cabinet.requests import CabinetError, json_response
from cabinet.services import SERVICES, CabinetServices

log = logging.getLogger("modelgate.cabinet")

ROUTES = (
    web.post("/auth/register", registration.register),
    web.post("/auth/login", account.login),
    web.get("/auth/session", account.current_session, allow_head=False),
    web.post("/auth/logout", account.logout),
    web.post("/auth/password", account.change_password),
    web.get("/members", members.list_members, allow_head=False),
    web.patch("/members/{userId}", members.change_role),
    web.delete("/members/{userId}", members.remove_member),
    web.post("/invitations", invitations.create_invitation),
    web.get("/invitations", invitations.list_invitations, allow_head=False),
    web.post("/invitations/accept", invitations.accept_invitation),
    web.post("/invitations/{id}/revoke", invitations.revoke_invitation),
    web.post("/organization/api-keys", api_keys.create_api_key),
    web.post("/organization/api-keys/{keyId}/revoke", api_keys.revoke_api_key),
    web.post("/organization/management-keys", management_keys.create_management_key),
    web.get("/organization/management-keys", management_keys.list_management_keys, allow_head=False),
    web.post("/organization/management-keys/{id}/revoke", management_keys.revoke_management_key),
    web.post("/systems", systems.create_system),
    web.get("/systems", systems.list_systems, allow_head=False),
    web.get("/systems/{id}", systems.get_system, allow_head=False),
    web.patch("/systems/{id}", systems.update_system),
    web.delete("/systems/{id}", systems.delete_system),
    web.get("/overview", overview.overview, allow_head=False),
    web.get("/audit-log", audit.audit_log_handler, allow_head=False),
    web.get("/openapi.json", openapi_handler, allow_head=False),
)

_HTTP_MESSAGES = {404: "not found", 405: "method not allowed", 413: "request body too large"}


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    response = json_response({"error": message}, status=status)
    if headers:
        response.headers.update(headers)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes `{"error": message}`; an unexpected one is logged and answered 500."""
    try:
        return await handler(request)
    except CabinetError as exc:
        return _error(exc.status, exc.message, exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return _error(exc.status, _HTTP_MESSAGES.get(exc.status, exc.reason.lower()), headers)
    except asyncio.CancelledError:
        raise
    except Exception:
        # The traceback goes to the log only; handlers never put secrets into exceptions.
        log.exception("cabinet request failed: %s %s", request.method, request.path)
        return _error(500, "internal error")


def build_cabinet_app(services: CabinetServices) -> web.Application:
    """The cabinet app, to be mounted under `/api`; routes inside are `/auth/register` etc."""
    app = web.Application(middlewares=[error_middleware])
    app[SERVICES] = services
    delivery = InvitationDelivery(services.config.cabinet.invitation_webhook_url)
    app[invitations.DELIVERY] = delivery

    async def finish_deliveries(_app: web.Application) -> None:
        await delivery.close()

    app.on_cleanup.append(finish_deliveries)
    app.router.add_routes(ROUTES)
    return app
