"""The `billing` member of GET /api/overview: plan, balance, activation, whether it may spend, usage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.billing_cabinet.billing_client import BillingCabinet, insert_usage


async def _billing(cabinet: BillingCabinet, token: str) -> dict:
    reply = await cabinet.call("GET", "/overview", token=token)
    assert reply.status == 200, reply.body
    return reply.body["billing"]


async def test_a_new_organization_on_a_paid_plan_cannot_spend_until_its_invoice_is_paid(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register(plan="pro")

    billing = await _billing(cabinet, owner.token)

    assert billing["plan"] == {
        "code": "pro",
        "name": "Pro",
        "monthlyFeeMicros": 49_000_000,
        "creditLimitMicros": 0,
    }
    assert (billing["balanceMicros"], billing["activated"], billing["activatedAt"]) == (0, False, None)
    assert (billing["creditLimitMicros"], billing["canSpend"]) == (0, False)
    assert [(i["status"], i["amountMicros"]) for i in billing["openInvoices"]] == [("open", 49_000_000)]
    assert billing["usage"]["requests"] == 0 and billing["usage"]["costMicros"] == 0


async def test_paying_the_invoice_activates_and_lets_the_organization_spend(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    await cabinet.operator("POST", f"/invoices/{await cabinet.open_invoice_id(owner)}/mark-paid")

    billing = await _billing(cabinet, owner.token)

    assert (billing["balanceMicros"], billing["activated"], billing["canSpend"]) == (49_000_000, True, True)
    assert billing["activatedAt"] is not None
    assert billing["openInvoices"] == []


async def test_a_plan_with_a_credit_limit_can_spend_before_any_payment(cabinet: BillingCabinet) -> None:
    # A credit plan is not open for self-registration: the operator invites the organization onto it.
    owner = await cabinet.register_invited("enterprise")

    billing = await _billing(cabinet, owner.token)

    # Its 0.00 invoice was paid as it was opened: nothing is owed, and the credit is there to spend.
    assert (billing["activated"], billing["creditLimitMicros"], billing["canSpend"]) == (
        True,
        1_000_000_000,
        True,
    )
    assert billing["openInvoices"] == []


async def test_the_overview_sums_this_months_usage_of_the_organization_only(cabinet: BillingCabinet) -> None:
    owner, other = await cabinet.register(), await cabinet.register()
    org, other_org = await cabinet.organization_id(owner), await cabinet.organization_id(other)
    now = datetime.now(UTC)
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    await insert_usage(cabinet.db, org, now.timestamp(), cost_micros=30)
    await insert_usage(cabinet.db, org, month_start.timestamp(), cost_micros=12)
    await insert_usage(cabinet.db, org, (month_start - timedelta(seconds=1)).timestamp(), cost_micros=1000)
    await insert_usage(cabinet.db, other_org, now.timestamp() - 1, cost_micros=5000)

    billing = await _billing(cabinet, owner.token)

    assert billing["usage"] == {
        "since": month_start.isoformat().replace("+00:00", "Z"),
        "requests": 2,
        "served": 2,
        "refused": 0,
        "errors": 0,
        "costMicros": 42,
    }


async def test_every_role_sees_the_billing_member(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    member = await cabinet.add_member(owner, "member")

    billing = await _billing(cabinet, member.token)

    assert set(billing) >= {
        "balanceMicros",
        "activated",
        "creditLimitMicros",
        "canSpend",
        "usage",
        "openInvoices",
    }
