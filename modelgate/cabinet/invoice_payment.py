"""What an open invoice tells its organization about paying it: the operator's payment link and
instructions (`[billing] payment_link` / `payment_instructions`, filled per invoice)."""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.invoices_repository import Invoice
from modelgate.config import BillingConfig
from modelgate.config.payment import fill_payment_template
from modelgate.domain.money import format_money


def payment_of(billing: BillingConfig, invoice: Invoice) -> dict[str, Any] | None:
    """`{link, instructions}` (each null when not configured) for an open invoice that owes money; None for
    any other (paid, void, or 0.00: nothing to pay)."""
    if invoice.status != "open" or invoice.amount_micros <= 0:
        return None
    values = {
        "invoice_id": invoice.id,
        "amount": format_money(invoice.amount_micros),
        "amount_micros": str(invoice.amount_micros),
        "currency": billing.currency,
        "organization_id": invoice.organization_id,
    }
    return {
        "link": fill_payment_template(billing.payment_link, values, url=True)
        if billing.payment_link
        else None,
        "instructions": fill_payment_template(billing.payment_instructions, values)
        if billing.payment_instructions
        else None,
    }


def invoice_with_payment(billing: BillingConfig, invoice: Invoice) -> dict[str, Any]:
    """The invoice object of the cabinet's API, with `payment` on an open invoice that owes money."""
    answer = invoice.to_json()
    payment = payment_of(billing, invoice)
    if payment is not None:
        answer["payment"] = payment
    return answer
