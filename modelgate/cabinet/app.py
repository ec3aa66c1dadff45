"""The cabinet (management API) as an aiohttp app: the route table and the error middleware.

The host mounts it with `root.add_subapp("/api", build_cabinet_app(services))`.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from modelgate.cabinet import (
    account,
    addresses,
    alerts,
    api_keys,
    audit,
    invitations,
    invoices,
    key_report,
    link_follow,
    management_keys,
    members,
    meters,
    model_catalogue,
    operator,
    organization_settings,
    overview,
    password_reset,
    policy_rules,
    registration,
    request_log,
    sign_in_options,
    systems,
    usage,
)
from modelgate.cabinet.alert_watcher import AlertWatcher
from modelgate.cabinet.invitation_delivery import InvitationDelivery
from modelgate.cabinet.mail import MAIL, Mail
from modelgate.cabinet.oidc import callback as oidc_callback
from modelgate.cabinet.oidc import domain_routes as oidc_domains
from modelgate.cabinet.oidc import exchange as oidc_exchange
from modelgate.cabinet.oidc import login as oidc_login
from modelgate.cabinet.oidc import provider_routes as oidc_providers
from modelgate.cabinet.oidc.runtime import install_sso
from modelgate.cabinet.openapi import openapi_handler
from modelgate.cabinet.requests import CabinetError, json_response, refuse_unstorable_query
from modelgate.cabinet.services import SERVICES, CabinetServices
from modelgate.storage.database import StorageUnavailable

log = logging.getLogger("modelgate.cabinet")

ROUTES = (
    web.post("/auth/register", registration.register),
    web.post("/auth/login", account.login),
    web.get("/auth/session", account.current_session, allow_head=False),
    web.post("/auth/logout", account.logout),
    web.post("/auth/password", account.change_password),
    web.post("/auth/password-reset", password_reset.request_password_reset),
    web.post("/auth/password-reset/confirm", password_reset.confirm_password_reset),
    web.post("/auth/verify-email", link_follow.follow_link),
    web.post("/auth/verify-email/send", addresses.resend_verification),
    web.post("/auth/email", addresses.request_address_change),
    web.post("/auth/oidc/providers", oidc_providers.create_provider),
    web.get("/auth/oidc/providers", oidc_providers.list_providers, allow_head=False),
    web.get("/auth/oidc/providers/{id}", oidc_providers.get_provider, allow_head=False),
    web.patch("/auth/oidc/providers/{id}", oidc_providers.update_provider),
    web.delete("/auth/oidc/providers/{id}", oidc_providers.remove_provider),
    web.post("/auth/oidc/providers/{id}/discover", oidc_providers.discover_provider),
    web.get("/auth/oidc/domains", oidc_domains.list_domains, allow_head=False),
    web.post("/auth/oidc/domains", oidc_domains.claim_domain),
    web.post("/auth/oidc/domains/{domain}/verify", oidc_domains.verify_domain),
    web.delete("/auth/oidc/domains/{domain}", oidc_domains.release_domain),
    web.get("/auth/oidc/{providerId}/login", oidc_login.start_login, allow_head=False),
    web.get("/auth/oidc/callback", oidc_callback.finish_login, allow_head=False),
    web.post("/auth/oidc/exchange", oidc_exchange.redeem_login_code),
    web.get("/members", members.list_members, allow_head=False),
    web.patch("/members/{userId}", members.change_role),
    web.delete("/members/{userId}", members.remove_member),
    web.post("/invitations", invitations.create_invitation),
    web.get("/invitations", invitations.list_invitations, allow_head=False),
    web.post("/invitations/accept", invitations.accept_invitation),
    web.post("/invitations/details", invitations.invitation_details),
    web.post("/invitations/{id}/revoke", invitations.revoke_invitation),
    web.post("/organization/api-keys", api_keys.create_api_key),
    web.post("/organization/api-keys/{keyId}/revoke", api_keys.revoke_api_key),
    web.get("/key-report", key_report.key_report, allow_head=False),
    web.get("/models", model_catalogue.list_models, allow_head=False),
    web.get("/organization/settings", organization_settings.get_settings, allow_head=False),
    web.patch("/organization/settings", organization_settings.update_settings),
    web.post("/organization/management-keys", management_keys.create_management_key),
    web.get("/organization/management-keys", management_keys.list_management_keys, allow_head=False),
    web.post("/organization/management-keys/{id}/revoke", management_keys.revoke_management_key),
    web.post("/systems", systems.create_system),
    web.get("/systems", systems.list_systems, allow_head=False),
    web.get("/systems/{id}", systems.get_system, allow_head=False),
    web.patch("/systems/{id}", systems.update_system),
    web.delete("/systems/{id}", systems.delete_system),
    web.get("/overview", overview.overview, allow_head=False),
    web.get("/meters", meters.meters, allow_head=False),
    web.get("/audit-log", audit.audit_log_handler, allow_head=False),
    web.post("/policy-rules", policy_rules.create_policy_rule),
    web.get("/policy-rules", policy_rules.list_policy_rules, allow_head=False),
    web.get("/policy-rules/{id}", policy_rules.get_policy_rule, allow_head=False),
    web.patch("/policy-rules/{id}", policy_rules.update_policy_rule),
    web.delete("/policy-rules/{id}", policy_rules.delete_policy_rule),
    web.get("/invoices", invoices.list_invoices, allow_head=False),
    web.get("/alerts", alerts.list_alerts, allow_head=False),
    web.post("/alerts", alerts.create_alert),
    web.get("/alerts/deliveries", alerts.list_deliveries, allow_head=False),
    web.post("/alerts/signing-secret/rotate", alerts.rotate_secret),
    web.delete("/alerts/{id}", alerts.delete_alert),
    web.get("/usage", usage.usage_report, allow_head=False),
    web.get("/requests", request_log.list_requests, allow_head=False),
    web.get("/requests.csv", request_log.export_requests, allow_head=False),
    web.get("/requests/{id}", request_log.get_request, allow_head=False),
    web.post("/operator/invoices/{id}/mark-paid", operator.operator_mark_paid),
    web.post("/operator/organizations/{id}/top-up", operator.operator_top_up),
    web.get("/operator/organizations/{id}/invoices", operator.operator_invoices, allow_head=False),
    web.post("/operator/organizations/{id}/adjust", operator.operator_adjust),
    web.post("/operator/organizations/{id}/plan", operator.operator_set_plan),
    web.post("/operator/organizations/{id}/sso-domains", oidc_domains.operator_approve_domain),
    web.delete("/operator/sso-domains/{domain}", oidc_domains.operator_release_domain),
    web.post("/operator/registration-invitations", operator.operator_invite_organization),
    web.get("/operator/mail", operator.operator_mail, allow_head=False),
    web.get("/openapi.json", openapi_handler, allow_head=False),
    # For the web cabinet's sign-in and registration pages: public, read-only, no token.
    web.get("/auth/sign-in-options", sign_in_options.sign_in_options, allow_head=False),
)

_HTTP_MESSAGES = {404: "not found", 405: "method not allowed", 413: "request body too large"}
# A write may have been committed when the database's answer was lost: read before repeating one.
_STORAGE_UNAVAILABLE = "storage unavailable; try again shortly (a change may have been applied: check first)"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    response = json_response({"error": message}, status=status)
    if headers:
        response.headers.update(headers)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes `{"error": message}`; storage that does not answer (an outage, a failover under
    way) is 503 with Retry-After; an unexpected failure is logged and answered 500.

    A query holding a NUL or invalid UTF-8 is refused here, for every endpoint, before any handler reads
    a value from it (PostgreSQL cannot even compare text with a NUL: a lookup with one would be a 500);
    except the single sign-on callback, a browser's redirect, which refuses it as it refuses any bad
    callback: a redirect to the cabinet with `error=invalid_state` (a 400 without a cabinet URL)."""
    try:
        if request.match_info.handler is not oidc_callback.finish_login:
            refuse_unstorable_query(request)
        return await handler(request)
    except CabinetError as exc:
        return _error(exc.status, exc.message, exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return _error(exc.status, _HTTP_MESSAGES.get(exc.status, exc.reason.lower()), headers)
    except StorageUnavailable as exc:
        log.warning("cabinet request refused: %s %s: %s", request.method, request.path, exc)
        return _error(503, _STORAGE_UNAVAILABLE, {"Retry-After": "1"})
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

    mail = Mail(services.config, services.db)
    app[MAIL] = mail

    watcher = AlertWatcher(services.config, services.db, mail)

    async def start_mail(_app: web.Application) -> None:
        if mail.sender is not None:
            mail.sender.start()
        watcher.start()

    async def finish_deliveries(_app: web.Application) -> None:
        await delivery.close()
        await watcher.stop()
        if mail.sender is not None:
            await mail.sender.stop()

    app.on_startup.append(start_mail)
    app.on_cleanup.append(finish_deliveries)
    install_sso(app)
    app.router.add_routes(ROUTES)
    return app
