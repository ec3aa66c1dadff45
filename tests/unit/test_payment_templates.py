"""The operator's payment link and instructions: checked when the config loads, filled per invoice."""

from __future__ import annotations

from modelgate.cabinet.invoice_payment import payment_of
from modelgate.cabinet.invoices_repository import Invoice
from modelgate.config import BillingConfig
from modelgate.config.payment import payment_link_template, payment_text_template

LINK = "https://pay.example/{invoice_id}?amount={amount}&org={organization_id}"


def _invoice(amount_micros: int, status: str = "open") -> Invoice:
    return Invoice("inv_0123", "org_a&b=c", "pro", amount_micros, status, 0.0, None)


def test_a_link_is_filled_with_percent_encoded_values() -> None:
    text = "Pay {amount} {currency} ref {invoice_id}"
    billing = BillingConfig(payment_link=LINK, payment_instructions=text)

    payment = payment_of(billing, _invoice(49_500_000))

    assert payment == {
        "link": "https://pay.example/inv_0123?amount=49.50&org=org_a%26b%3Dc",
        "instructions": "Pay 49.50 USD ref inv_0123",
    }


def test_nothing_configured_gives_nulls_and_a_paid_or_free_invoice_has_no_payment() -> None:
    billing = BillingConfig(payment_link=LINK)

    assert payment_of(BillingConfig(), _invoice(1)) == {"link": None, "instructions": None}
    assert payment_of(billing, _invoice(0)) is None
    assert payment_of(billing, _invoice(5, "paid")) is None


def test_templates_with_unknown_placeholders_or_a_non_http_link_are_refused() -> None:
    assert payment_link_template(LINK) is None
    assert "unknown placeholder {invoice}" in (payment_link_template("https://p.example/{invoice}") or "")
    assert "http" in (payment_link_template("javascript:alert({invoice_id})") or "")
    assert "http" in (payment_link_template("{invoice_id}") or "")
    assert "not a valid template" in (payment_text_template("Pay {amount") or "")
    assert payment_text_template("   ") is not None
    assert payment_text_template("Transfer {amount} {currency}; a literal {{brace}}") is None
