"""The billing gate: a request is forwarded only if its worst-case cost fits in the organization's
balance (plus the plan's credit limit) and in every budget of the policy rules that apply — 402 otherwise.

Until the first invoice is paid only a plan with a credit limit may spend. Reservations are settled to
the real cost when the answer is complete, or released when it failed, so concurrent requests never
overspend.
"""

from __future__ import annotations

import time

from billing.accounts import Accounts
from billing.media import FREE_ROUTES, media_worst_case
from billing.prices import ensure_estimate
from plugins.base import Plugin
from proxy.context import RequestContext, Usage


def final_cost(ctx: RequestContext) -> int:
    """The cost to charge for a finished request (computed once, shared by billing and metering)."""
    if ctx.cost_micros is None:
        # 101: a realtime session, charged from the usage its events reported.
        if ctx.row is None or ctx.status not in (200, 101) or ctx.route.name in FREE_ROUTES:
            ctx.cost_micros = 0
        elif ctx.usage is not None:
            ctx.cost_micros = ctx.model.prices.cost(ctx.usage)
        else:
            # No usage reported (e.g. the client left mid-stream): charge what was seen, ~4 bytes a token.
            ctx.usage = Usage(input_tokens=len(ctx.body) // 4, output_tokens=ctx.bytes_sent // 4)
            ctx.cost_micros = ctx.model.prices.cost(ctx.usage)
    return ctx.cost_micros


class BillingGate(Plugin):
    """Reserves the worst-case cost before forwarding; settles the real cost after."""

    name = "billing_gate"

    def __init__(self, accounts: Accounts) -> None:
        self._accounts = accounts

    async def on_request(self, ctx: RequestContext) -> None:
        if ctx.model is None:
            return
        ensure_estimate(ctx)
        prices = ctx.model.prices
        worst = media_worst_case(ctx.route.name, ctx.payload, prices)
        if worst is None:
            worst = prices.worst_case(ctx.estimated_input_tokens, ctx.max_output_tokens)
        key = ctx.key
        await self._accounts.reserve_balance(key.organization_id, key.plan_code, worst, key.balance_counter)
        ctx.reservations.append((key.balance_counter, worst))
        if ctx.decision is not None and ctx.decision.budget_rules:
            now = time.time()
            for rule in ctx.decision.budget_rules:
                counter, start = await self._accounts.reserve_budget(rule, worst, now)
                ctx.reservations.append((counter, worst))
                ctx.budgets.append((rule.id, start))

    async def on_complete(self, ctx: RequestContext) -> None:
        if not ctx.reservations:
            return
        cost = final_cost(ctx)
        for counter, reserved in ctx.reservations:
            await self._accounts.settle(counter, reserved, cost)
