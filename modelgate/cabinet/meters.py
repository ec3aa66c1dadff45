"""GET /api/meters: what the gateway's live counters say about an organization right now.

A budget meter shows the spend of its period *and* what requests in flight hold of it (their reservations,
each a request's worst case), read from the budget's live counter (in-process, or Redis when configured);
a budget no request has used since the gateway started is read from the stored spend. A budget is
"refusing" when the next request could not fit: no room is left, or less room than the last reservation it
was asked (a budget of $0.00005 a day whose requests each reserve more refuses them all while its spend
stays at $0.00). What a budget was last asked is known to the process that asked it: with several gateway
processes, the one answering the cabinet sees the asks of the requests it served. The plan's limits (RPM,
TPM, credit) come with the current minute's use of the organization's windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.clock import isoformat, now
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import json_response
from modelgate.cabinet.services import services_of
from modelgate.domain.accounts import Accounts, budget_key, org_rpm_window, org_tpm_window
from modelgate.domain.money import to_micros
from modelgate.domain.policy_decisions import PolicyRule, period_start
from modelgate.domain.policy_rules import budget_spent, policy_rules_of
from modelgate.storage.database import Database

# A limit no window reaches: reading a window's use takes nothing from it and is never refused.
_READ_ONLY_LIMIT = 1 << 62


@dataclass(frozen=True, slots=True)
class BudgetMeter:
    """One budget in its current period: its limit, spend, what requests in flight hold, the last ask."""

    rule: PolicyRule
    period_start: float
    limit: int
    spent: int
    held: int
    last_ask: tuple[int, float, bool] | None  # (amount, time, refused) of the last reservation asked

    @property
    def available(self) -> int:
        return self.limit - self.spent - self.held

    @property
    def refusing(self) -> bool:
        """The next request could not fit: nothing left, or less than the last request asked."""
        return self.available <= 0 or (self.last_ask is not None and self.last_ask[0] > self.available)

    def to_json(self) -> dict[str, Any]:
        rule = self.rule
        return {
            "ruleId": rule.id,
            "subjectType": rule.subject_type,
            "subjectId": rule.subject_id if rule.subject_type != "organization" else None,
            "models": list(rule.models),
            "description": rule.description,
            "period": rule.budget_period,
            "periodStart": isoformat(self.period_start),
            "limitMicros": self.limit,
            "spentMicros": self.spent,
            "heldMicros": self.held,
            "availableMicros": self.available,
            "refusing": self.refusing,
            "lastReservation": None
            if self.last_ask is None
            else {
                "askedMicros": self.last_ask[0],
                "at": isoformat(self.last_ask[1]),
                "refused": self.last_ask[2],
            },
        }


async def budget_meter(db: Database, accounts: Accounts | None, rule: PolicyRule, at: float) -> BudgetMeter:
    """The meter of a budget rule at `at`, from its live counter when the gateway has one built."""
    start = period_start(rule.budget_period or "month", at)
    limit = rule.budget_micros or 0
    counter = budget_key(rule, start)
    money = await accounts.counters.money(counter) if accounts is not None else None
    if money is None:
        spent, held = await budget_spent(db, rule.id, start), 0
    else:
        balance, held = money
        spent = limit - balance  # the counter started at the limit less the stored spend of the period
    last_ask = accounts.budget_asks.last(counter) if accounts is not None else None
    return BudgetMeter(rule, start, limit, spent, held, last_ask)


async def minute_use(accounts: Accounts | None, organization_id: str) -> tuple[int, int]:
    """(requests, tokens) the organization's windows hold for the last 60 seconds. 0 without a gateway, and
    for a limit the plan does not set (the gateway keeps no window for it)."""
    if accounts is None:
        return 0, 0
    asks = [
        (org_rpm_window(organization_id), 0, _READ_ONLY_LIMIT),
        (org_tpm_window(organization_id), 0, _READ_ONLY_LIMIT),
    ]
    requests, tokens = await accounts.counters.admit(asks)
    return requests.used, tokens.used


async def meters(request: web.Request) -> web.Response:
    """GET /meters → the plan's limits with this minute's use, and every budget's meter (any role)."""
    services = services_of(request)
    principal = await authenticate(request)
    db = services.db
    org = await require_organization(db, principal.organization_id)
    at = now()
    rules = [
        rule
        for rule in await policy_rules_of(db, org.id)
        if rule.effect == "allow" and rule.budget_micros is not None and rule.budget_period
    ]
    budgets = [await budget_meter(db, services.accounts, rule, at) for rule in rules]
    plan = services.config.plan(org.plan_code)
    requests_used, tokens_used = await minute_use(services.accounts, org.id)
    return json_response(
        {
            "currency": services.config.billing.currency,
            "plan": {
                "code": org.plan_code,
                "name": plan.name if plan else org.plan_code,
                "rpm": plan.rpm if plan else 0,
                "tpm": plan.tpm if plan else 0,
                "creditLimitMicros": to_micros(plan.credit_limit) if plan else 0,
            },
            "currentMinute": {"requests": requests_used, "tokens": tokens_used},
            "budgets": [meter.to_json() for meter in budgets],
        }
    )
