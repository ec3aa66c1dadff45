"""Invoices in the browser: a free plan's 0.00 invoice is paid, never "unpaid"; a plan's open invoice offers
the operator's payment link and instructions, filled for that invoice."""

from __future__ import annotations

import re

from tests.web.browser import Contexts, expect, open_route, screenshot, settle
from tests.web.web_gateway import TEAM_FEE_USD, TEAM_PLAN, WebGateway

UNPAID = re.compile(r"unpaid|Pay \$0\.00|quoting", re.IGNORECASE)


def test_a_free_plans_zero_invoice_is_paid_and_never_shown_as_unpaid(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("free-invoice")
    member = gateway.add_member(owner, "member")

    for account in (owner, member):
        page = contexts.signed_in(account).new_page()
        open_route(page, "", "Overview")
        expect(page.locator("#page")).not_to_contain_text(UNPAID)
        open_route(page, "invoices", "Invoices")
        row = page.locator("tr", has_text="$0.00")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("paid")
        expect(page.locator("#page")).not_to_contain_text(UNPAID)
        expect(page.locator("#page")).to_contain_text("All invoices are paid.")


def test_an_open_invoice_offers_the_operators_payment_link_and_instructions(
    contexts: Contexts, gateway: WebGateway
) -> None:
    owner = gateway.register("team-invoice", plan=TEAM_PLAN)
    [invoice] = gateway.api("GET", "/invoices", owner)["invoices"]
    page = contexts.signed_in(owner).new_page()

    open_route(page, "invoices", "Invoices")
    link = page.get_by_role("link", name=f"Pay ${TEAM_FEE_USD:.2f} online")
    expected = f"https://pay.example/checkout/{invoice['id']}?amount=12.50&currency=USD"
    expect(link).to_have_attribute("href", expected)
    expect(page.locator("#page")).to_contain_text(
        f"Or transfer 12.50 USD to IBAN DE00 1234 with the reference {invoice['id']}."
    )
    expect(page.locator("#page")).not_to_contain_text("quoting")
    screenshot(page, "invoices-payment-link")

    open_route(page, "", "Overview")
    unpaid = page.locator(".notice").filter(has_text="Your first invoice is unpaid")
    overview_link = unpaid.get_by_role("link", name=f"Pay ${TEAM_FEE_USD:.2f} online")
    expect(overview_link).to_have_attribute("href", expected)

    # Once the operator marks it paid, nothing is left to pay and the link is gone.
    gateway.operator(f"/invoices/{invoice['id']}/mark-paid")
    page.reload()
    settle(page, "Overview")
    expect(page.locator("#page")).not_to_contain_text(re.compile("unpaid", re.IGNORECASE))
    open_route(page, "invoices", "Invoices")
    expect(page.get_by_role("link", name=re.compile("online"))).to_have_count(0)
    expect(page.locator("#page")).to_contain_text("All invoices are paid.")
