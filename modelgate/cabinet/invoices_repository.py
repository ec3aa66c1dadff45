"""Invoices as stored: the `Invoice` record and the only SQL on `invoices`.

An organization has one invoice per period of its plan, plus the operator's balance top-ups. Registration
opens the first plan invoice here; paying and topping up live in `cabinet.billing`, the handler that lists
them in `modelgate/cabinet/invoices.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.config import PlanConfig
from modelgate.domain.money import to_micros
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor

PLAN_INVOICE = "plan"
TOP_UP_INVOICE = "top_up"
_COLUMNS = "id, organization_id, plan_code, amount_micros, status, created_at, paid_at, kind"


@dataclass(frozen=True, slots=True)
class Invoice:
    """An amount an organization owes for its plan (`plan`) or paid into its balance (`top_up`).

    `open` until paid (or voided); paying credits the amount to the organization's balance.
    """

    id: str
    organization_id: str
    plan_code: str
    amount_micros: int
    status: str
    created_at: float
    paid_at: float | None
    kind: str = PLAN_INVOICE

    def to_json(self) -> dict[str, Any]:
        """The invoice object of the API."""
        return {
            "id": self.id,
            "kind": self.kind,
            "planCode": self.plan_code,
            "amountMicros": self.amount_micros,
            "status": self.status,
            "createdAt": isoformat(self.created_at),
            "paidAt": isoformat(self.paid_at),
        }


async def insert_invoice(tx: Executor, invoice: Invoice) -> Invoice:
    """Store a new invoice as given."""
    await tx.execute(
        f"INSERT INTO invoices ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        invoice.id,
        invoice.organization_id,
        invoice.plan_code,
        invoice.amount_micros,
        invoice.status,
        invoice.created_at,
        invoice.paid_at,
        invoice.kind,
    )
    return invoice


async def open_plan_invoice(tx: Executor, organization_id: str, plan: PlanConfig, at: float) -> Invoice:
    """Open an invoice for one period of the plan's monthly fee; a 0.00 one is paid as it is opened (the
    caller applies what paying it means: `cabinet.billing.settle_free_invoice`)."""
    amount = to_micros(plan.monthly_fee)
    status, paid_at = ("open", None) if amount > 0 else ("paid", at)
    invoice = Invoice(new_id("inv"), organization_id, plan.code, amount, status, at, paid_at)
    return await insert_invoice(tx, invoice)


async def pay_open_invoice(tx: Executor, invoice_id: str, at: float) -> bool:
    """Mark an open invoice paid; False when it is unknown or not open (the guard against paying twice:
    of two concurrent payments only one changes the row)."""
    changed = await tx.execute(
        "UPDATE invoices SET status = 'paid', paid_at = $2 WHERE id = $1 AND status = 'open'", invoice_id, at
    )
    return bool(changed)


async def invoice_by_id(ex: Executor, invoice_id: str) -> Invoice | None:
    """Any organization's invoice (operator use); None when unknown."""
    row = await ex.fetchrow(f"SELECT {_COLUMNS} FROM invoices WHERE id = $1", invoice_id)
    return Invoice(**row) if row else None


async def invoices_of(ex: Executor, organization_id: str) -> list[Invoice]:
    """The organization's invoices, newest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM invoices WHERE organization_id = $1 ORDER BY created_at DESC, id DESC",
        organization_id,
    )
    return [Invoice(**row) for row in rows]


async def open_invoices(ex: Executor, organization_id: str) -> list[Invoice]:
    """The organization's unpaid invoices that owe money, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM invoices WHERE organization_id = $1 AND status = 'open'"
        " AND amount_micros > 0 ORDER BY created_at, id",
        organization_id,
    )
    return [Invoice(**row) for row in rows]
