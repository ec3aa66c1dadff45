"""Monthly allowances of plans: granted when an organization is activated and once in every later month,
as idempotent balance events, even when several processes grant at the same time."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from modelgate.config import Config
from modelgate.domain.allowance import allowance_event_id, grant_due_allowances
from modelgate.domain.events import BalanceEvent
from modelgate.storage import open_database
from tests.integration.billing_cabinet.billing_client import (
    BillingCabinet,
    BillingCabinetFactory,
    billing_config,
)
from tests.integration.billing_cabinet.test_billing_cli import run_billing, write_config

ALLOWANCE_MICROS = 2_500_000
DAY = 86_400.0


def allowance_config(plan: str = "free") -> Config:
    """The default plans, `plan` (the free one unless told) with a monthly allowance of 2.50."""
    config = billing_config()
    plans = tuple(replace(p, monthly_allowance=2.5) if p.code == plan else p for p in config.plans)
    return replace(config, plans=plans)


def next_month(at: float) -> float:
    day = datetime.fromtimestamp(at, UTC)
    return datetime(day.year + day.month // 12, day.month % 12 + 1, 1, 12, tzinfo=UTC).timestamp()


async def _allowance_events(cabinet: BillingCabinet, org_id: str) -> list[str]:
    rows = await cabinet.db.fetch(
        "SELECT id FROM balance_events WHERE organization_id = $1 AND kind = 'allowance' ORDER BY seq", org_id
    )
    return [row["id"] for row in rows]


async def test_registering_on_a_free_plan_pays_its_zero_invoice_and_grants_the_allowance(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet(allowance_config())
    owner = await cabinet.register(plan="free")
    org_id = await cabinet.organization_id(owner)
    [invoice] = (await cabinet.call("GET", "/invoices", token=owner.token)).body["invoices"]

    again = await cabinet.operator("POST", f"/invoices/{invoice['id']}/mark-paid")
    topped = await cabinet.operator("POST", f"/organizations/{org_id}/top-up", json={"amountMicros": 1})

    # The 0.00 invoice was paid as it was opened: nothing to pay, the organization is active at once.
    assert (invoice["amountMicros"], invoice["status"]) == (0, "paid")
    assert invoice["paidAt"] == invoice["createdAt"]
    assert "payment" not in invoice
    assert (again.status, again.body) == (409, {"error": "invoice already paid"})
    assert topped.body["balanceMicros"] == ALLOWANCE_MICROS + 1  # the month's allowance is granted once
    assert await _allowance_events(cabinet, org_id) == [allowance_event_id(org_id, time.time())]
    overview = (await cabinet.call("GET", "/overview", token=owner.token)).body["billing"]
    assert (overview["activated"], overview["canSpend"], overview["balanceMicros"]) == (
        True,
        True,
        ALLOWANCE_MICROS + 1,
    )
    assert overview["openInvoices"] == []


async def test_a_plan_without_an_allowance_and_an_unpaid_organization_get_none(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    config = allowance_config("pro")  # free has none; pro has one, but its invoice is not paid
    cabinet = await start_billing_cabinet(config)
    free = await cabinet.register(plan="free")
    unpaid = await cabinet.register(plan="pro")

    granted = await grant_due_allowances(cabinet.db, config, next_month(time.time()), _ignore)

    assert granted == 0
    assert await _allowance_events(cabinet, await cabinet.organization_id(free)) == []
    assert await _allowance_events(cabinet, await cabinet.organization_id(unpaid)) == []


async def _ignore(_event: BalanceEvent) -> None:
    return None


async def test_each_later_month_is_granted_once_however_many_processes_grant(
    start_billing_cabinet: BillingCabinetFactory, storage_url: str
) -> None:
    config = allowance_config()
    cabinet = await start_billing_cabinet(config)
    owners = [await cabinet.register(plan="free") for _ in range(3)]
    org_ids = [await cabinet.organization_id(owner) for owner in owners]
    later = next_month(time.time())
    # Three "gateway processes": each with its own connection (pool) to the same database.
    others = [await open_database(storage_url) for _ in range(2)]
    announced: list[BalanceEvent] = []

    async def announce(event: BalanceEvent) -> None:
        announced.append(event)

    try:
        counts = await asyncio.gather(
            *(grant_due_allowances(db, config, later, announce) for db in (cabinet.db, *others))
        )
        again = await grant_due_allowances(others[0], config, later, announce)
    finally:
        for db in others:
            await db.close()

    assert sum(counts) == 3 and again == 0
    assert sorted(e.organization_id for e in announced) == sorted(org_ids)
    assert all(e.amount_micros == ALLOWANCE_MICROS and e.kind == "allowance" for e in announced)
    for org_id in org_ids:
        assert await _allowance_events(cabinet, org_id) == [
            allowance_event_id(org_id, time.time()),
            allowance_event_id(org_id, later),
        ]
        # It rolls over: nothing spent, so the balance holds both months.
        assert await cabinet.balance(org_id) == 2 * ALLOWANCE_MICROS


def _with_pro_allowance(config: str) -> str:
    """The CLI's config file, its plan "pro" given the allowance of 2.50."""
    path = Path(config)
    path.write_text(
        path.read_text().replace("monthly_fee = 49.0\n", "monthly_fee = 49.0\nmonthly_allowance = 2.5\n")
    )
    return config


async def test_marking_paid_from_the_cli_grants_the_allowance_too(
    start_billing_cabinet: BillingCabinetFactory, storage_url: str, tmp_path: Path
) -> None:
    cabinet = await start_billing_cabinet(allowance_config("pro"))
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    config = _with_pro_allowance(write_config(tmp_path, storage_url))

    code, out, err = await run_billing("mark-paid", await cabinet.open_invoice_id(owner), "--config", config)

    assert code == 0, err
    assert "credited 49.00 USD; balance 51.50 USD" in out
    assert await _allowance_events(cabinet, org_id) == [allowance_event_id(org_id, time.time())]


async def test_an_activated_organization_moved_onto_a_plan_with_an_allowance_gets_it_at_once(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet(allowance_config())
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    await cabinet.operator("POST", f"/invoices/{await cabinet.open_invoice_id(owner)}/mark-paid")

    for plan in ("free", "pro", "free"):
        moved = await cabinet.operator("POST", f"/organizations/{org_id}/plan", json={"planCode": plan})
        assert moved.status == 200, moved.body

    assert await _allowance_events(cabinet, org_id) == [allowance_event_id(org_id, time.time())]
    assert await cabinet.balance(org_id) == 49_000_000 + ALLOWANCE_MICROS
    assert cabinet.billing.credited == [(org_id, 49_000_000), (org_id, ALLOWANCE_MICROS)]
