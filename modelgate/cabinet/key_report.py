"""GET /api/key-report: the keys page's table, a page at a time: each key with its creation, last use, spend
today and this month, and the limits that apply to it (its plan's and its rules').

Last use and spend are read from the ledger (modelgate/cabinet/key_report_repository.py), so the model API
writes nothing per request for them. The key objects of the description stay as they are (GET /api/overview
lists them all); this report adds what a team admin steers keys by, sorted and paged in SQL.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.key_report_repository import SORTS, KeyActivity, key_activity_page
from modelgate.cabinet.model_catalogue import plan_limits_json
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import bad_request, json_response
from modelgate.cabinet.services import services_of
from modelgate.domain.policy_decisions import period_start
from modelgate.domain.policy_rules import ACCESS_EFFECTS, PolicyRule, budget_spent, policy_rules_of
from modelgate.storage.database import Executor

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_QUERY_LENGTH = 200


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise bad_request(f"{name} must be an integer from {low} to {high}")
    return int(text)


def _sort(request: web.Request) -> tuple[str, bool]:
    text = request.query.get("sort") or "-created"
    descending = text.startswith("-")
    name = text[1:] if descending else text
    if name not in SORTS:
        choices = ", ".join(SORTS)
        raise bad_request(f"sort must be one of: {choices} (a leading - sorts descending)")
    return name, descending


def _applicable(rules: list[PolicyRule], key: KeyActivity) -> list[PolicyRule]:
    """The access rules that apply to the key: of its organization, of its system and of the key itself."""
    return [
        rule
        for rule in rules
        if rule.effect in ACCESS_EFFECTS
        and (
            rule.subject_type == "organization"
            or (rule.subject_type == "key" and rule.subject_id == key.id)
            or (rule.subject_type == "system" and rule.subject_id == key.system_id)
        )
    ]


async def _rule_json(ex: Executor, rule: PolicyRule, at: float) -> dict[str, Any]:
    budget = None
    if rule.budget_micros is not None:
        period = rule.budget_period or "month"
        budget = {
            "amountMicros": rule.budget_micros,
            "period": period,
            "spentMicros": await budget_spent(ex, rule.id, period_start(period, at)),
        }
    return {
        "id": rule.id,
        "subjectType": rule.subject_type,
        "effect": rule.effect,
        "models": list(rule.models),
        "budget": budget,
        "rpm": rule.rpm,
        "tpm": rule.tpm,
    }


async def key_report(request: web.Request) -> web.Response:
    """GET /key-report?q=&sort=&limit=&offset= (any role) → `{keys, total, limit, offset, sort, plan}`."""
    services = services_of(request)
    principal = await authenticate(request)
    query = (request.query.get("q") or "").strip()
    if len(query) > MAX_QUERY_LENGTH:
        raise bad_request(f"q must be at most {MAX_QUERY_LENGTH} characters")
    sort, descending = _sort(request)
    limit = _int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _int_param(request, "offset", 0, 0, 10**9)
    db = services.db
    org = await require_organization(db, principal.organization_id)
    at = now()
    total, keys = await key_activity_page(
        db,
        org.id,
        query=query,
        sort=sort,
        descending=descending,
        limit=limit,
        offset=offset,
        day_start=period_start("day", at),
        month_start=period_start("month", at),
    )
    rules = await policy_rules_of(db, org.id)
    rule_objects = {
        rule.id: await _rule_json(db, rule, at) for rule in rules if rule.effect in ACCESS_EFFECTS
    }
    return json_response(
        {
            "keys": [
                {
                    "id": key.id,
                    "alias": key.alias,
                    "ownerEmail": key.owner_email,
                    "systemId": key.system_id,
                    "status": key.status,
                    "createdAt": isoformat(key.created_at),
                    "revokedAt": isoformat(key.revoked_at),
                    "lastUsedAt": isoformat(key.last_used_at),
                    "spendTodayMicros": key.spend_today_micros,
                    "spendMonthMicros": key.spend_month_micros,
                    "rules": [rule_objects[rule.id] for rule in _applicable(rules, key)],
                }
                for key in keys
            ],
            "total": total,
            "limit": limit,
            "offset": offset,
            "sort": f"-{sort}" if descending else sort,
            "plan": plan_limits_json(services.config.plan(org.plan_code)),
        }
    )
