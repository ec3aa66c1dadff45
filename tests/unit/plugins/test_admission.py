"""Admission: the request's windows and reservations are taken at once, or none of them, with the refusal
of the first plugin that would have refused (429 before 402)."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InsufficientBalance, RateLimited
from modelgate.plugins.admission import Admission
from modelgate.plugins.billing_gate import BillingGate
from modelgate.plugins.rate_limits import RateLimits
from tests.support.plugin_context import (
    CHAT,
    PluginServices,
    StoredKey,
    add_key,
    add_policy_rule,
    context_before,
    run_hook,
)


async def _recorded(services: PluginServices, key: StoredKey):
    """A request as the rate limits and the billing gate leave it: everything asked, nothing taken."""
    ctx = await context_before("rate_limits", services, payload=CHAT, key=key.record)
    RateLimits(services.config, services.counters).on_request(ctx)
    await run_hook(BillingGate(services.accounts).on_request(ctx))
    return ctx


async def test_everything_asked_is_taken_and_reported(services: PluginServices, key: StoredKey) -> None:
    ctx = await _recorded(services, key)
    amount = ctx.admission.money[0].amount

    await run_hook(Admission(services.counters).on_request(ctx))

    assert ctx.admission.taken
    assert ctx.admission.reserved_micros == amount
    assert ctx.admission.reservations == [(key.record.balance_counter, amount)]
    assert [window for window, _second, _amount in ctx.admission.token_windows] == [
        key.record.tpm_window,
        key.record.org_tpm_window,
    ]
    assert ctx.response_headers["x-ratelimit-limit-requests"] == "60"
    assert ctx.response_headers["x-ratelimit-remaining-requests"] == "59"
    assert await services.counters.money(key.record.balance_counter) == (10_000_000, amount)


async def test_a_request_that_asked_nothing_takes_nothing(services: PluginServices) -> None:
    ctx = await context_before("admission", services, method="GET", path="/v1/models")

    await run_hook(Admission(services.counters).on_request(ctx))

    assert not ctx.admission.asked and ctx.admission.reservations == []


async def test_a_full_request_window_is_429_with_retry_hints_and_takes_no_money(
    services: PluginServices,
) -> None:
    tight = await add_key(services, plan="tight", balance_usd=10.0)  # one request a minute
    first = await _recorded(services, tight)
    await run_hook(Admission(services.counters).on_request(first))
    second = await _recorded(services, tight)

    with pytest.raises(RateLimited) as caught:
        await run_hook(Admission(services.counters).on_request(second))

    headers = caught.value.headers
    assert caught.value.status == 429
    assert (headers["x-ratelimit-limit-requests"], headers["x-ratelimit-remaining-requests"]) == ("1", "0")
    assert int(headers["retry-after"]) >= 1
    assert not second.admission.taken and second.admission.reservations == []
    _balance, reserved = await services.counters.money(tight.record.balance_counter)
    assert reserved == first.admission.reserved_micros  # the first request's hold only


async def test_a_balance_that_cannot_cover_the_worst_case_is_402_and_takes_no_window(
    services: PluginServices,
) -> None:
    broke = await add_key(services, balance_usd=0.0)
    ctx = await _recorded(services, broke)

    with pytest.raises(InsufficientBalance, match="cannot cover this request's maximum cost") as caught:
        await run_hook(Admission(services.counters).on_request(ctx))

    assert (caught.value.status, caught.value.code) == (402, "insufficient_balance")
    (probe,) = await services.counters.admit([(broke.record.rpm_window, 0, 10**9)])
    assert probe.used == 0


async def test_an_organization_whose_first_invoice_is_unpaid_is_402(services: PluginServices) -> None:
    unpaid = await add_key(services, balance_usd=10.0, activated=False)

    with pytest.raises(InsufficientBalance, match="first invoice is not paid yet"):
        await run_hook(Admission(services.counters).on_request(await _recorded(services, unpaid)))


async def test_an_exhausted_budget_is_402_naming_its_rule(services: PluginServices, key: StoredKey) -> None:
    rule_id = await add_policy_rule(services, key.record, budget_usd=0.000001, budget_period="month")

    with pytest.raises(InsufficientBalance, match=f"monthly budget of policy rule {rule_id} is exhausted"):
        await run_hook(Admission(services.counters).on_request(await _recorded(services, key)))


async def test_an_exhausted_daily_budget_is_402_naming_its_rule(
    services: PluginServices, key: StoredKey
) -> None:
    rule_id = await add_policy_rule(services, key.record, budget_usd=0.000001, budget_period="day")

    with pytest.raises(InsufficientBalance, match=f"daily budget of policy rule {rule_id} is exhausted"):
        await run_hook(Admission(services.counters).on_request(await _recorded(services, key)))
