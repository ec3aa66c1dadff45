"""The billing gate: a request is forwarded only if its worst-case cost fits in the organization's
balance (plus the plan's credit limit) and in every budget of the policy rules that apply — 402 otherwise.

Until the first invoice is paid only a plan with a credit limit may spend. The worst case is a hard bound:
the output cap it assumes is the one sent upstream (`plugins.output_caps`), and the charge never exceeds it.
The reservations are taken by the admission step right after this one (`plugins.admission`) and settled to
the real cost when the request ends however it ends, so concurrent requests never overspend. Calls that
generate nothing reserve 0 and cost nothing.
"""

from __future__ import annotations

import logging
import time

from modelgate.domain.accounts import Accounts
from modelgate.domain.media import media_worst_case
from modelgate.domain.usage import BYTES_PER_TOKEN, StreamUsageScanner, Usage
from modelgate.plugins.admission import admit
from modelgate.plugins.output_caps import ensure_estimate
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.realtime.billing import check_one_response

log = logging.getLogger("modelgate.billing")


def final_cost(ctx: RequestContext) -> int:
    """The cost to charge for a finished request (computed once, shared by billing and metering).

    Charged: every answer the upstream started to give (a success status relayed), whatever happened after —
    from the upstream's usage, or for a stream cut short from what was relayed — never above the reservation.
    """
    if ctx.metering.cost_micros is None:
        if ctx.route.free or not (ctx.answered_status or ctx.metering.abandoned):
            ctx.metering.cost_micros = 0
        else:
            ctx.metering.usage = delivered_usage(ctx)
            cost = ctx.model.prices.cost(ctx.metering.usage)
            if ctx.admission.reserved_micros is not None and cost > ctx.admission.reserved_micros:
                log.warning(
                    "request %s cost %d µ over its reservation of %d µ; charged the reservation",
                    ctx.request_id,
                    cost,
                    ctx.admission.reserved_micros,
                    extra={"request_id": ctx.request_id},
                )
                cost = ctx.admission.reserved_micros
            ctx.metering.cost_micros = cost
    return ctx.metering.cost_micros


class BillingGate(Plugin):
    """Reserves the worst-case cost before forwarding; settles the real cost after."""

    name = "billing_gate"
    requires = frozenset({"route", "key", "model"})
    provides = frozenset({"admission"})

    def __init__(self, accounts: Accounts) -> None:
        self._accounts = accounts

    async def on_request(self, ctx: RequestContext) -> None:
        route = ctx.route
        if route.websocket:  # reserved per response by the relay; here: can it afford one?
            await admit(self._accounts.counters, ctx)  # its windows first: 429 before 402
            return await check_one_response(self._accounts, ctx)
        if ctx.model is None:
            return
        admission = ctx.admission
        if route.free:
            worst = 0  # costs nothing, but an organization that may not spend (unpaid) may not call it either
        else:
            if not admission.max_output_tokens:  # usually filled in already (plugins.output_caps)
                ensure_estimate(ctx)
            prices = ctx.model.prices
            worst = None if route.media is None else media_worst_case(route.media, ctx.payload, prices)
            if worst is None:
                worst = prices.worst_case(admission.estimated_input_tokens, admission.max_output_tokens)
        # Recorded for the admission step, which reserves on the balance and every budget at once, or on none.
        key = ctx.key
        accounts = self._accounts
        admission.money.append(
            accounts.balance_ask(key.organization_id, key.plan_code, worst, key.balance_counter)
        )
        decision = ctx.decision
        if decision is not None and decision.budget_rules:
            now = time.time()
            for rule in decision.budget_rules:
                ask, start = accounts.budget_ask(rule, worst, now)
                admission.money.append(ask)
                admission.budgets.append((rule, start))

    async def on_complete(self, ctx: RequestContext) -> None:
        reservations = ctx.admission.reservations
        if not reservations or (ctx.metering.background_id and ctx.answered_status == 200):
            return  # nothing reserved; or held until a background response's final usage is known
        cost = final_cost(ctx)
        # Batched with other requests' (and this one's TPM corrections); its ledger row follows once the batch
        # is written (UsageMetering), so the handler never waits on Redis here.
        await self._accounts.queue_settlement(reservations, cost, ctx.metering.ledger_row_id)


def delivered_usage(ctx: RequestContext) -> Usage:
    """The usage to charge for an answered request: the upstream's for a complete answer; for one cut short,
    at least the generated text that was relayed (the prompt, when unreported, from the body size)."""
    usage = ctx.metering.usage
    if ctx.outcome == "completed" and usage is not None:
        return usage
    scanner = ctx.metering.scanner
    relayed = (
        scanner.content_tokens if isinstance(scanner, StreamUsageScanner) else ctx.metering.content_tokens
    )
    if (
        ctx.admission.max_output_tokens
    ):  # an estimate never passes the output allowance the provider was held to
        relayed = min(relayed, ctx.admission.max_output_tokens)
    if usage is None:
        return Usage(input_tokens=len(ctx.body) // BYTES_PER_TOKEN, output_tokens=relayed, estimated=True)
    if not usage.input_tokens:
        usage.input_tokens = len(ctx.body) // BYTES_PER_TOKEN
        usage.estimated = True
    if relayed > usage.output_tokens:
        usage.output_tokens = relayed
        usage.estimated = True
    return usage
