"""Operator adjustments of a balance (credit, debit, set) and plan changes: the operator API, the CLI on
storage and through a gateway, the audit trail, and what the model API is told after commit."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.integration.billing_cabinet.billing_client import OPERATOR_TOKEN, BillingCabinet
from tests.integration.billing_cabinet.test_billing_cli import run_billing, write_config
from tests.integration.cabinet.cabinet_client import Account


async def _adjust(cabinet: BillingCabinet, org_id: str, kind: str, amount: int, reason: str = "correction"):
    return await cabinet.operator(
        "POST",
        f"/organizations/{org_id}/adjust",
        json={"kind": kind, "amountMicros": amount, "reason": reason},
    )


async def _sum_of_events(cabinet: BillingCabinet, org_id: str) -> int:
    return int(
        await cabinet.db.fetchval(
            "SELECT COALESCE(SUM(amount_micros), 0) FROM balance_events WHERE organization_id = $1", org_id
        )
    )


async def test_credit_debit_and_set_apply_signed_deltas_and_answer_the_balance(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)

    credit = await _adjust(cabinet, org_id, "credit", 5_000_000, "refund of a failed batch")
    debit = await _adjust(cabinet, org_id, "debit", 7_000_000, "chargeback")
    to_set = await _adjust(cabinet, org_id, "set", 1_250_000, "manual correction")
    freeze = await _adjust(cabinet, org_id, "set", 0, "freeze")

    assert credit.status == 201, credit.body
    assert (credit.body["kind"], credit.body["amountMicros"], credit.body["balanceMicros"]) == (
        "credit",
        5_000_000,
        5_000_000,
    )
    # A debit may take the balance below zero: a chargeback is owed, not refused.
    assert (debit.body["amountMicros"], debit.body["balanceMicros"]) == (-7_000_000, -2_000_000)
    assert (to_set.body["amountMicros"], to_set.body["balanceMicros"]) == (3_250_000, 1_250_000)
    assert (freeze.body["requestedMicros"], freeze.body["amountMicros"], freeze.body["balanceMicros"]) == (
        0,
        -1_250_000,
        0,
    )
    assert credit.body["id"].startswith("bev_") and credit.body["currency"] == "USD"
    assert await cabinet.balance(org_id) == 0 == await _sum_of_events(cabinet, org_id)
    # The model API heard each event once, after its commit.
    assert cabinet.billing.credited == [
        (org_id, 5_000_000),
        (org_id, -7_000_000),
        (org_id, 3_250_000),
        (org_id, -1_250_000),
    ]
    assert cabinet.billing.balances_seen == [5_000_000, -2_000_000, 1_250_000, 0]
    entries = [e for e in await cabinet.audit_events(owner) if e["event"] == "balance.adjusted"]
    assert [(e["details"]["kind"], e["details"]["reason"]) for e in reversed(entries)] == [
        ("credit", "refund of a failed batch"),
        ("debit", "chargeback"),
        ("set", "manual correction"),
        ("set", "freeze"),
    ]
    assert entries[0]["actor"]["type"] == "operator" and entries[0]["targetId"] == freeze.body["id"]


async def test_invalid_adjustments_are_400_and_change_nothing(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    path = f"/organizations/{org_id}/adjust"

    cases = [
        ({"kind": "gift", "amountMicros": 1, "reason": "x"}, "kind must be one of: credit, debit, set"),
        ({"kind": "credit", "amountMicros": 0, "reason": "x"}, "amountMicros of a credit must be from 1"),
        ({"kind": "debit", "amountMicros": -5, "reason": "x"}, "amountMicros of a debit must be from 1"),
        ({"kind": "credit", "amountMicros": 1.5, "reason": "x"}, "amountMicros must be an integer"),
        ({"kind": "credit", "amountMicros": True, "reason": "x"}, "amountMicros must be an integer"),
        ({"kind": "set", "amountMicros": 10**16, "reason": "x"}, "amountMicros of a set must be from"),
        ({"kind": "credit", "amountMicros": 1, "reason": "  "}, "reason is required"),
        ({"kind": "credit", "amountMicros": 1, "reason": "r" * 501}, "reason must be at most 500"),
        ({"kind": "credit", "amountMicros": 1}, "reason is required"),
        ({"kind": "credit", "amountMicros": 1, "reason": "x", "by": "me"}, "unknown field: by"),
    ]
    for body, message in cases:
        reply = await cabinet.operator("POST", path, json=body)
        assert reply.status == 400 and reply.body["error"].startswith(message), (body, reply.body)
    unknown = await _adjust(cabinet, "org_0123456789abcdef", "credit", 1)
    unauthorised = await cabinet.operator(
        "POST", path, token="wrong", json={"kind": "credit", "amountMicros": 1, "reason": "x"}
    )

    assert (unknown.status, unknown.body) == (404, {"error": "organization not found"})
    assert unauthorised.status == 401
    assert await cabinet.balance(org_id) == 0
    assert await cabinet.db.fetchval("SELECT COUNT(*) FROM balance_events") == 0
    assert cabinet.billing.credited == []


async def test_a_set_racing_credits_computes_its_delta_inside_its_transaction(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)

    replies = await asyncio.gather(
        *(
            _adjust(cabinet, org_id, "set", 100_000_000)
            if i % 2
            else _adjust(cabinet, org_id, "credit", 1_000)
            for i in range(12)
        )
    )

    assert all(r.status == 201 for r in replies), [r.body for r in replies]
    # Whatever the order, the events' deltas add up to the stored balance: no set used a stale balance.
    balance = await cabinet.balance(org_id)
    assert balance == await _sum_of_events(cabinet, org_id)
    assert balance in {100_000_000 + 1_000 * n for n in range(7)}


async def test_a_plan_change_is_audited_and_told_to_the_model_api_after_commit(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register(plan="free")
    org_id = await cabinet.organization_id(owner)

    changed = await cabinet.operator("POST", f"/organizations/{org_id}/plan", json={"planCode": "enterprise"})
    unknown_plan = await cabinet.operator("POST", f"/organizations/{org_id}/plan", json={"planCode": "gold"})
    missing = await cabinet.operator("POST", f"/organizations/{org_id}/plan", json={})
    unknown_org = await cabinet.operator(
        "POST", "/organizations/org_0123456789abcdef/plan", json={"planCode": "pro"}
    )

    assert (changed.status, changed.body) == (
        200,
        {"organizationId": org_id, "planCode": "enterprise", "previousPlanCode": "free"},
    )
    assert unknown_plan.status == 400 and unknown_plan.body["error"].startswith("planCode must be one of")
    assert (missing.status, missing.body) == (400, {"error": "planCode is required"})
    assert unknown_org.status == 404
    # The sink saw the committed plan: it was called after the commit, once.
    assert cabinet.billing.plan_changes == [(org_id, "enterprise")]
    overview = (await cabinet.call("GET", "/overview", token=owner.token)).body
    assert (overview["organization"]["planCode"], overview["billing"]["canSpend"]) == ("enterprise", True)
    [entry] = [e for e in await cabinet.audit_events(owner) if e["event"] == "plan.changed"]
    assert entry["details"] == {"from": "free", "to": "enterprise", "via": "api"}


async def test_adjust_and_set_plan_from_the_cli_on_storage_and_through_a_gateway(
    cabinet: BillingCabinet, storage_url: str, tmp_path: Path
) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    config = write_config(tmp_path, storage_url, '[[plans]]\ncode = "free"\n')
    url = str(cabinet.client.make_url("/"))

    credited = await run_billing("adjust", org_id, "credit", "10", "--reason", "goodwill", "--config", config)
    debited = await run_billing(
        "adjust", org_id, "debit", "12.5", "--reason", "chargeback", "--url", url, token=OPERATOR_TOKEN
    )
    to_set = await run_billing("adjust", org_id, "set", "-3", "--reason", "owed", "--config", config)
    no_reason = await run_billing("adjust", org_id, "credit", "1", "--config", config)
    zero_credit = await run_billing("adjust", org_id, "credit", "0", "--reason", "x", "--config", config)
    planned = await run_billing("set-plan", org_id, "free", "--config", config)
    planned_back = await run_billing("set-plan", org_id, "pro", "--url", url, token=OPERATOR_TOKEN)

    assert credited[0] == 0, credited[2]
    assert (
        f"adjusted (credit): organization {org_id}, +10.00 USD; balance 10.00 USD (event bev_" in credited[1]
    )
    assert debited[0] == 0, debited[2]
    assert "-12.50 USD; balance -2.50 USD" in debited[1]
    assert to_set[0] == 0, to_set[2]
    assert "-0.50 USD; balance -3.00 USD" in to_set[1]
    assert no_reason[0] == 2 and "--reason" in no_reason[2]
    assert zero_credit[0] == 2 and "the amount must be a positive number" in zero_credit[2]
    assert planned[0] == 0, planned[2]
    assert f"plan of organization {org_id}: pro -> free" in planned[1]
    assert planned_back[0] == 0 and "free -> pro" in planned_back[1]
    assert await cabinet.balance(org_id) == -3_000_000
    # Only the change made through the running gateway reached its sink directly.
    assert cabinet.billing.credited == [(org_id, -12_500_000)]
    assert cabinet.billing.plan_changes == [(org_id, "pro")]
    entries = await cabinet.audit_events(Account(owner.token, owner.email))
    vias = [(e["event"], e["details"]["via"]) for e in entries if e["event"] != "auth.registered"]
    assert vias == [
        ("plan.changed", "api"),
        ("plan.changed", "cli"),
        ("balance.adjusted", "cli"),
        ("balance.adjusted", "api"),
        ("balance.adjusted", "cli"),
    ]
    if cabinet.db.dialect == "sqlite":
        # Running gateways on the same SQLite file hear both through the channel file beside it.
        assert "notified running gateways on modelgate_billing (the host channel)" in credited[1]
        assert "notified running gateways on modelgate_plan_changed (the host channel)" in planned[1]
        assert "notified running gateways on modelgate_billing (the host channel)" in to_set[1]
    else:
        assert "notified running gateways on modelgate_billing (PostgreSQL)" in credited[1]
        assert "notified running gateways on modelgate_plan_changed (PostgreSQL)" in planned[1]


async def test_a_budget_of_zero_is_accepted_and_stored(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")

    reply = await cabinet.create_rule(owner, budget={"amountMicros": 0, "period": "day"})

    assert reply.status == 201, reply.body
    assert reply.body["budget"] == {"amountMicros": 0, "period": "day"}
    assert (
        await cabinet.db.fetchval("SELECT budget_micros FROM policy_rules WHERE id = $1", reply.body["id"])
        == 0
    )
