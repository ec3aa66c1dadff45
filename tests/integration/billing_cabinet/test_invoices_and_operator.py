"""Invoices of an organization, and the operator API that marks them paid and tops balances up."""

from __future__ import annotations

import asyncio

from modelgate.cabinet.billing import mark_invoice_paid, top_up
from modelgate.cabinet.requests import CabinetError
from tests.integration.billing_cabinet.billing_client import (
    OPERATOR_TOKEN,
    BillingCabinet,
    BillingCabinetFactory,
    billing_config,
)

PRO_FEE_MICROS = 49_000_000


async def test_registration_opens_one_plan_invoice_listed_for_every_role(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    member = await cabinet.add_member(owner, "member")

    reply = await cabinet.call("GET", "/invoices", token=member.token)

    assert reply.status == 200
    [invoice] = reply.body["invoices"]
    assert {k: v for k, v in invoice.items() if k not in ("id", "createdAt")} == {
        "kind": "plan",
        "planCode": "pro",
        "amountMicros": PRO_FEE_MICROS,
        "status": "open",
        "paidAt": None,
        # Nothing configured: the cabinet says to pay as agreed with the operator.
        "payment": {"link": None, "instructions": None},
    }


async def test_invoices_are_listed_newest_first(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    first = await cabinet.open_invoice_id(owner)

    top_up_reply = await cabinet.operator("POST", f"/organizations/{org_id}/top-up", json={"amountMicros": 5})
    listed = await cabinet.call("GET", "/invoices", token=owner.token)

    assert [i["id"] for i in listed.body["invoices"]] == [top_up_reply.body["invoice"]["id"], first]


async def test_an_organization_never_sees_another_organizations_invoices(cabinet: BillingCabinet) -> None:
    alice, bob = await cabinet.register(), await cabinet.register()
    bobs_invoice = await cabinet.open_invoice_id(bob)

    alices = await cabinet.call("GET", "/invoices", token=alice.token)

    assert bobs_invoice not in [i["id"] for i in alices.body["invoices"]]
    assert len(alices.body["invoices"]) == 1


async def test_invoices_need_a_bearer_token(cabinet: BillingCabinet) -> None:
    assert (await cabinet.call("GET", "/invoices")).status == 401


async def test_marking_an_invoice_paid_credits_the_balance_and_activates_the_organization(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)

    reply = await cabinet.operator("POST", f"/invoices/{invoice_id}/mark-paid")
    listed = await cabinet.call("GET", "/invoices", token=owner.token)
    overview = await cabinet.call("GET", "/overview", token=owner.token)

    assert reply.status == 200
    assert reply.body["organizationId"] == org_id
    assert (reply.body["creditedMicros"], reply.body["balanceMicros"]) == (PRO_FEE_MICROS, PRO_FEE_MICROS)
    assert (reply.body["invoice"]["status"], reply.body["currency"]) == ("paid", "USD")
    assert reply.body["invoice"]["paidAt"] is not None
    assert listed.body["invoices"][0]["status"] == "paid"
    assert await cabinet.balance(org_id) == PRO_FEE_MICROS
    assert (
        await cabinet.db.fetchval("SELECT activated_at FROM organizations WHERE id = $1", org_id) is not None
    )
    assert overview.body["billing"]["activated"] is True
    assert overview.body["billing"]["openInvoices"] == []


async def test_paying_an_invoice_twice_is_refused_and_credits_once(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)

    first = await cabinet.operator("POST", f"/invoices/{invoice_id}/mark-paid")
    second = await cabinet.operator("POST", f"/invoices/{invoice_id}/mark-paid")

    assert first.status == 200
    assert (second.status, second.body) == (409, {"error": "invoice already paid"})
    assert await cabinet.balance(org_id) == PRO_FEE_MICROS
    assert cabinet.billing.credited == [(org_id, PRO_FEE_MICROS)]


async def test_concurrent_payments_of_one_invoice_credit_it_once(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)

    replies = await asyncio.gather(
        *(cabinet.operator("POST", f"/invoices/{invoice_id}/mark-paid") for _ in range(5))
    )

    assert sorted(r.status for r in replies) == [200, 409, 409, 409, 409]
    assert await cabinet.balance(org_id) == PRO_FEE_MICROS


async def test_an_unknown_invoice_is_404(cabinet: BillingCabinet) -> None:
    unknown = await cabinet.operator("POST", "/invoices/inv_0123456789abcdef/mark-paid")
    malformed = await cabinet.operator("POST", "/invoices/nonsense/mark-paid")

    assert (unknown.status, unknown.body) == (404, {"error": "invoice not found"})
    assert (malformed.status, malformed.body) == (404, {"error": "invoice not found"})


async def test_the_sink_hears_a_payment_once_after_its_commit(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)

    await cabinet.operator("POST", f"/invoices/{await cabinet.open_invoice_id(owner)}/mark-paid")
    await cabinet.operator("POST", f"/organizations/{org_id}/top-up", json={"amountMicros": 1_000})

    assert cabinet.billing.credited == [(org_id, PRO_FEE_MICROS), (org_id, 1_000)]
    # Read around the request's transaction: the credit was already committed when the sink heard of it.
    assert cabinet.billing.balances_seen == [PRO_FEE_MICROS, PRO_FEE_MICROS + 1_000]


async def test_a_payment_is_audited_as_an_operator_action(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    invoice_id = await cabinet.open_invoice_id(owner)

    await cabinet.operator("POST", f"/invoices/{invoice_id}/mark-paid")
    [entry] = [e for e in await cabinet.audit_events(owner) if e["event"] == "invoice.paid"]

    assert entry["targetId"] == invoice_id
    assert entry["actor"] == {"type": "operator", "id": None, "email": None}
    assert entry["details"] == {"amountMicros": PRO_FEE_MICROS, "kind": "plan", "via": "api"}


async def test_the_operator_api_refuses_a_missing_or_wrong_token_and_cabinet_tokens(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)
    management_key = (await cabinet.create_management_key(owner)).body["secret"]
    model_key = (await cabinet.create_key(owner)).body["secret"]
    paths = [
        ("POST", f"/invoices/{invoice_id}/mark-paid"),
        ("POST", f"/organizations/{org_id}/top-up"),
        ("GET", f"/organizations/{org_id}/invoices"),
    ]

    for method, path in paths:
        for token in (None, "wrong", OPERATOR_TOKEN + "x", owner.token, management_key, model_key):
            reply = await cabinet.operator(method, path, token=token, json={"amountMicros": 5})

            assert reply.status == 401, (method, path, token)
            assert list(reply.body) == ["error"]
    assert await cabinet.balance(org_id) == 0
    assert cabinet.billing.credited == []


async def test_without_an_operator_token_the_operator_api_is_absent(
    start_billing_cabinet: BillingCabinetFactory,
) -> None:
    cabinet = await start_billing_cabinet(billing_config(operator_token=None))
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)

    replies = [
        await cabinet.operator("POST", f"/invoices/{await cabinet.open_invoice_id(owner)}/mark-paid"),
        await cabinet.operator("POST", f"/organizations/{org_id}/top-up", json={"amountMicros": 5}),
        await cabinet.operator("GET", f"/organizations/{org_id}/invoices", token=None),
    ]

    assert [(r.status, r.body) for r in replies] == [(404, {"error": "not found"})] * 3
    assert await cabinet.balance(org_id) == 0


async def test_a_top_up_adds_a_paid_top_up_invoice_and_activates(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)

    reply = await cabinet.operator(
        "POST", f"/organizations/{org_id}/top-up", json={"amountMicros": 2_500_000}
    )
    overview = await cabinet.call("GET", "/overview", token=owner.token)

    assert reply.status == 201
    assert (reply.body["creditedMicros"], reply.body["balanceMicros"]) == (2_500_000, 2_500_000)
    invoice = reply.body["invoice"]
    assert (invoice["kind"], invoice["status"], invoice["amountMicros"], invoice["planCode"]) == (
        "top_up",
        "paid",
        2_500_000,
        "pro",
    )
    assert overview.body["billing"]["activated"] is True
    assert overview.body["billing"]["balanceMicros"] == 2_500_000
    # The plan invoice stays open: a top-up is money on account, not a payment of the fee.
    assert len(overview.body["billing"]["openInvoices"]) == 1
    assert "balance.topped_up" in [e["event"] for e in await cabinet.audit_events(owner)]


async def test_invalid_top_ups_are_4xx_and_credit_nothing(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register()
    org_id = await cabinet.organization_id(owner)
    path = f"/organizations/{org_id}/top-up"

    cases = [
        ({}, 400, "amountMicros is required"),
        ({"amountMicros": 0}, 400, "amountMicros must be from 1"),
        ({"amountMicros": -5}, 400, "amountMicros must be from 1"),
        ({"amountMicros": 10**16}, 400, "amountMicros must be from 1"),
        ({"amountMicros": 1.5}, 400, "amountMicros must be an integer"),
        ({"amountMicros": "5"}, 400, "amountMicros must be an integer"),
        ({"amountMicros": True}, 400, "amountMicros must be an integer"),
        ({"amountMicros": 5, "note": "x"}, 400, "unknown field: note"),
    ]
    for body, status, message in cases:
        reply = await cabinet.operator("POST", path, json=body)

        assert reply.status == status, (body, reply.body)
        assert reply.body["error"].startswith(message), (body, reply.body)
    not_json = await cabinet.call(
        "POST",
        f"/operator{path}",
        token=OPERATOR_TOKEN,
        data=b"{",
        headers={"Content-Type": "application/json"},
    )
    unknown_org = await cabinet.operator(
        "POST", "/organizations/org_0123456789abcdef/top-up", json={"amountMicros": 5}
    )

    assert (not_json.status, not_json.body) == (400, {"error": "request body is not valid JSON"})
    assert (unknown_org.status, unknown_org.body) == (404, {"error": "organization not found"})
    assert await cabinet.balance(org_id) == 0
    assert cabinet.billing.credited == []


async def test_the_operator_lists_an_organizations_invoices_and_balance(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(legal_name="Globex", plan="pro")
    org_id = await cabinet.organization_id(owner)
    await cabinet.operator("POST", f"/invoices/{await cabinet.open_invoice_id(owner)}/mark-paid")

    reply = await cabinet.operator("GET", f"/organizations/{org_id}/invoices")
    unknown = await cabinet.operator("GET", "/organizations/org_0123456789abcdef/invoices")

    assert reply.status == 200
    assert (reply.body["organizationId"], reply.body["legalName"], reply.body["planCode"]) == (
        org_id,
        "Globex",
        "pro",
    )
    assert (reply.body["balanceMicros"], reply.body["activated"]) == (PRO_FEE_MICROS, True)
    assert [i["status"] for i in reply.body["invoices"]] == ["paid"]
    assert (unknown.status, unknown.body) == (404, {"error": "organization not found"})


async def test_the_first_payment_sets_the_activation_time_and_later_ones_keep_it(
    cabinet: BillingCabinet,
) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)

    async with cabinet.db.transaction() as tx:
        invoice, event = await mark_invoice_paid(tx, invoice_id, 1_000.0)
    async with cabinet.db.transaction() as tx:
        await top_up(tx, org_id, 7, 2_000.0)

    assert (invoice.status, invoice.paid_at) == ("paid", 1_000.0)
    assert (event.organization_id, event.amount_micros, event.activates) == (org_id, PRO_FEE_MICROS, True)
    assert (
        await cabinet.db.fetchval("SELECT activated_at FROM organizations WHERE id = $1", org_id) == 1_000.0
    )
    assert await cabinet.balance(org_id) == PRO_FEE_MICROS + 7


async def test_a_failed_payment_changes_nothing(cabinet: BillingCabinet) -> None:
    owner = await cabinet.register(plan="pro")
    org_id = await cabinet.organization_id(owner)
    invoice_id = await cabinet.open_invoice_id(owner)
    async with cabinet.db.transaction() as tx:
        await mark_invoice_paid(tx, invoice_id, 1_000.0)

    try:
        async with cabinet.db.transaction() as tx:
            await mark_invoice_paid(tx, invoice_id, 2_000.0)
    except CabinetError as exc:
        error = exc
    else:
        raise AssertionError("paying twice must fail")

    assert (error.status, error.message) == (409, "invoice already paid")
    assert await cabinet.balance(org_id) == PRO_FEE_MICROS
    row = await cabinet.db.fetchrow("SELECT status, paid_at FROM invoices WHERE id = $1", invoice_id)
    assert row == {"status": "paid", "paid_at": 1_000.0}
