"""The billing gate: a request is forwarded only if its worst-case cost fits in the organization's
balance (plus the plan's credit limit) and in every budget of the policy rules that apply — 402 otherwise.

Until the first invoice is paid only a plan with a credit limit may spend. The worst case bounds what the
provider can bill: the output cap it assumes is the one sent upstream, and the prompt includes what the body
does not show (previous responses, conversations, stored prompts, files, media URLs: `plugins.output_caps`).
The reservations are taken by the admission step right after this one (`plugins.admission`) and settled to
the real cost when the request ends however it ends. The charge is the truth (docs/billing.md): a provider
that still bills more is charged in full, and the overrun is recorded. Calls that generate nothing reserve 0
and cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

from modelgate.domain.accounts import Accounts
from modelgate.domain.charges import charge_usage, delivered_usage, reservation
from modelgate.domain.usage import StreamUsageScanner
from modelgate.plugins.admission import admit
from modelgate.plugins.output_caps import ensure_estimate
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.realtime.billing import check_one_response


def final_cost(ctx: RequestContext) -> int:
    """The cost to charge for a finished request (computed once, shared by billing and metering;
    domain.charges has the rules).

    Charged: every answer the upstream started to give (a success status relayed), whatever happened after —
    from the upstream's usage, or for a stream cut short from what was relayed — in full, even past the
    reservation (the excess is recorded in `ctx.metering.over_reservation_micros`). Only usage beyond what
    the model can physically produce (its context window plus the output allowance sent) is charged at that
    bound instead; a request whose prompt hosted tools feed, or a media call, has no such bound.
    """
    metering = ctx.metering
    cost = metering.cost_micros
    if cost is None:
        route = ctx.matched_route
        if route.free or not (ctx.answered_status or metering.abandoned):
            cost = metering.cost_micros = 0
        else:
            admission = ctx.admission
            usage = metering.usage
            if usage is None or ctx.outcome != "completed":  # the estimate: said on the row
                scanner = metering.scanner
                relayed = (
                    scanner.content_tokens
                    if isinstance(scanner, StreamUsageScanner)
                    else metering.content_tokens
                )
                metering.usage = usage = delivered_usage(
                    usage, len(ctx.body), relayed, admission.max_output_tokens
                )
            bounded = route.cap is not None and route.media is None and not admission.hosted_tools
            model = ctx.routed_model
            cost = charge_usage(
                metering,
                model.prices,
                usage,
                admission.reserved_micros,
                model.config.max_context_tokens,
                admission.max_output_tokens if bounded else 0,
            )
    return cost


class BillingGate(Plugin):
    """Reserves the worst-case cost before forwarding; settles the real cost after."""

    name = "billing_gate"
    requires = frozenset(
        {
            "answered_status",
            "body",
            "body_stream",
            "decision",
            "key",
            "metering",
            "model",
            "outcome",
            "payload",
            "response_headers",
            "route",
        }
    )
    provides = frozenset({"admission", "payload_changed"})

    def __init__(self, accounts: Accounts) -> None:
        self._accounts = accounts

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        # A plain function: only a realtime connect waits here (the usual request records its asks).
        route = ctx.matched_route
        if route.websocket:  # reserved per response by the relay; here: can it afford one?
            return self._one_response(ctx)
        if ctx.model is None:
            return None
        admission = ctx.admission
        if route.free:
            worst = 0  # costs nothing, but an organization that may not spend (unpaid) may not call it either
        else:
            if not admission.max_output_tokens:  # usually filled in already (plugins.output_caps)
                ensure_estimate(ctx)
            worst = reservation(
                ctx.model.prices,
                admission.estimated_input_tokens,
                admission.max_output_tokens,
                route.media,
                ctx.payload,
            )
        # Recorded for the admission step, which reserves on the balance and every budget at once, or on none.
        key = ctx.api_key
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
        return None

    async def _one_response(self, ctx: RequestContext) -> None:
        await admit(self._accounts.counters, ctx)  # its windows first: 429 before 402
        await check_one_response(self._accounts, ctx)

    def on_complete(self, ctx: RequestContext) -> Awaitable[None] | None:
        reservations = ctx.admission.reservations
        if not reservations or (ctx.metering.background_id and ctx.answered_status == 200):
            return None  # nothing reserved; or held until a background response's final usage is known
        cost = final_cost(ctx)
        # Batched with other requests' (and this one's TPM corrections); its ledger row follows once the batch
        # is written (UsageMetering), so the handler never waits on Redis here. The settlement's own
        # awaitable goes to the chain, not wrapped in a coroutine of this hook's.
        return self._accounts.queue_settlement(reservations, cost, ctx.metering.ledger_row_id)
