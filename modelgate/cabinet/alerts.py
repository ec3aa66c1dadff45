"""Spend alerts of an organization (owners only): `GET/POST /alerts`, `DELETE /alerts/{id}`, the webhook
delivery log `GET /alerts/deliveries` and the rotation of the webhook signing secret
`POST /alerts/signing-secret/rotate`. Stored by `modelgate/cabinet/alerts_repository.py`, fired and
delivered by `modelgate/cabinet/alert_watcher.py`."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from modelgate.cabinet.alerts_repository import (
    BUDGET,
    DAILY,
    SpendAlert,
    alerts_of,
    create_signing_secret,
    deliveries_of,
    insert_alert,
    rotate_signing_secret,
    signing_secret,
)
from modelgate.cabinet.alerts_repository import delete_alert as delete_stored_alert
from modelgate.cabinet.audit import actor_of
from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import now
from modelgate.cabinet.requests import CabinetError, bad_request, json_response, path_id, read_json_object
from modelgate.cabinet.services import services_of
from modelgate.domain.audit_log import record
from modelgate.domain.money import MAX_CREDIT_MICROS
from modelgate.domain.policy_rules import rule_in_organization, subject_in_organization
from modelgate.domain.tokens import new_id

OWNER = ("owner",)
PERCENTS = (50, 80, 100)
SUBJECT_TYPES = ("organization", "system", "key")
MAX_ALERTS = 100
MAX_URL_LENGTH = 2000
_FIELDS = {"kind", "url", "ruleId", "percent", "subjectType", "subjectId", "amountMicros"}


def alert_not_found() -> CabinetError:
    return CabinetError(404, "alert not found")


def check_url(value: Any) -> str:
    """A webhook URL: http or https with a host, or 400."""
    if not isinstance(value, str) or not value.strip():
        raise bad_request("url is required")
    value = value.strip()
    parts = urlsplit(value)
    if len(value) > MAX_URL_LENGTH or parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad_request(
            f"url must be an http:// or https:// URL with a host, at most {MAX_URL_LENGTH} characters"
        )
    return value


def _integer(body: dict[str, Any], field: str) -> int:
    value = body.get(field)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{field} must be an integer")
    return value


async def _read_alert(request: web.Request, organization_id: str) -> SpendAlert:
    body = await read_json_object(request)
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise bad_request(f"unknown field: {unknown[0]}")
    kind = body.get("kind")
    if kind not in (BUDGET, DAILY):
        raise bad_request("kind must be one of: budget, daily")
    url = check_url(body.get("url"))
    db = services_of(request).db
    alert_id, at = new_id("alr"), now()
    if kind == BUDGET:
        rule_id = body.get("ruleId")
        if not isinstance(rule_id, str) or not rule_id:
            raise bad_request("ruleId is required for a budget alert")
        rule = await rule_in_organization(db, organization_id, rule_id)
        if rule is None or rule.budget_micros is None:
            raise bad_request(f"ruleId {rule_id!r} names no policy rule with a budget")
        percent = _integer(body, "percent")
        if percent not in PERCENTS:
            raise bad_request("percent must be one of: 50, 80, 100")
        return SpendAlert(alert_id, organization_id, BUDGET, rule.id, percent, None, None, None, url, at)
    subject_type = body.get("subjectType", "organization")
    if subject_type not in SUBJECT_TYPES:
        raise bad_request("subjectType must be one of: organization, system, key")
    subject_id = body.get("subjectId")
    if subject_type == "organization":
        subject_id = None
    elif not isinstance(subject_id, str) or not await subject_in_organization(
        db, organization_id, subject_type, subject_id
    ):
        raise bad_request(
            f"subjectId must name one of your {'systems' if subject_type == 'system' else 'API keys'}"
        )
    amount = _integer(body, "amountMicros")
    if not 0 < amount <= MAX_CREDIT_MICROS:
        raise bad_request(f"amountMicros must be from 1 to {MAX_CREDIT_MICROS}")
    return SpendAlert(alert_id, organization_id, DAILY, None, None, subject_type, subject_id, amount, url, at)


async def list_alerts(request: web.Request) -> web.Response:
    """GET /alerts → {alerts, hasSigningSecret} (owners)."""
    principal = await authenticate(request, roles=OWNER)
    db = services_of(request).db
    alerts = await alerts_of(db, principal.organization_id)
    return json_response(
        {
            "alerts": [alert.to_json() for alert in alerts],
            "hasSigningSecret": await signing_secret(db, principal.organization_id) is not None,
        }
    )


async def create_alert(request: web.Request) -> web.Response:
    """POST /alerts → 201 the alert; the organization's first alert also answers its webhook signing secret
    (`signingSecret`), shown this once."""
    principal = await authenticate(request, roles=OWNER)
    alert = await _read_alert(request, principal.organization_id)
    services = services_of(request)
    async with services.db.transaction() as tx:
        if len(await alerts_of(tx, principal.organization_id)) >= MAX_ALERTS:
            raise bad_request(f"an organization may have at most {MAX_ALERTS} alerts")
        await insert_alert(tx, alert)
        secret = await create_signing_secret(tx, principal.organization_id, alert.created_at)
        await record(
            tx,
            principal.organization_id,
            "alert.created",
            actor_of(principal),
            alert.created_at,
            target_id=alert.id,
            details={
                k: v for k, v in alert.to_json().items() if k not in ("id", "createdAt") and v is not None
            },
        )
    answer = alert.to_json()
    if secret is not None:
        answer["signingSecret"] = secret
    return json_response(answer, status=201)


async def delete_alert(request: web.Request) -> web.Response:
    """DELETE /alerts/{id} → 204; its delivery log stays."""
    principal = await authenticate(request, roles=OWNER)
    alert_id = path_id(request, "id", unknown=alert_not_found())
    async with services_of(request).db.transaction() as tx:
        if not await delete_stored_alert(tx, principal.organization_id, alert_id):
            raise alert_not_found()
        await record(
            tx, principal.organization_id, "alert.deleted", actor_of(principal), now(), target_id=alert_id
        )
    return web.Response(status=204)


async def rotate_secret(request: web.Request) -> web.Response:
    """POST /alerts/signing-secret/rotate → {signingSecret}: a new webhook signing secret, shown this once;
    the old one signs no delivery from now on, retries of earlier ones included (owners; audited)."""
    principal = await authenticate(request, roles=OWNER)
    at = now()
    async with services_of(request).db.transaction() as tx:
        secret = await rotate_signing_secret(tx, principal.organization_id, at)
        await record(tx, principal.organization_id, "alert.signing_secret_rotated", actor_of(principal), at)
    return json_response({"signingSecret": secret})


async def list_deliveries(request: web.Request) -> web.Response:
    """GET /alerts/deliveries → {deliveries}: the latest 100 webhook deliveries, newest first (owners)."""
    principal = await authenticate(request, roles=OWNER)
    deliveries = await deliveries_of(services_of(request).db, principal.organization_id)
    return json_response({"deliveries": [delivery.to_json() for delivery in deliveries]})
