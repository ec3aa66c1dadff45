"""Invoices of an organization's plan, and the billing part of the overview.

Registration opens the first invoice here; the billing work (payment, balance, ledger) builds on the same
records and extends `billing_overview`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cabinet.clock import isoformat
from cabinet.organizations import Organization
from cabinet.storage.database import Executor
from cabinet.tokens import new_id
from config import Config, PlanConfig

MICROS_PER_UNIT = 1_000_000
_COLUMNS = "id, organization_id, plan_code, amount_micros, status, created_at, paid_at"


@dataclass(frozen=True, slots=True)
class Invoice:
    """An amount an organization owes for its plan; `open` until paid (or voided)."""

    id: str
    organization_id: str
    plan_code: str
    amount_micros: int
    status: str
    created_at: float
    paid_at: float | None

    def to_json(self) -> dict[str, Any]:
        """The invoice object of the API."""
        return {
            "id": self.id,
            "planCode": self.plan_code,
            "amountMicros": self.amount_micros,
            "status": self.status,
            "createdAt": isoformat(self.created_at),
            "paidAt": isoformat(self.paid_at),
        }


def to_micros(amount: float) -> int:
    """A configured money amount (currency units) as integer micro-units."""
    return round(amount * MICROS_PER_UNIT)


async def open_plan_invoice(tx: Executor, organization_id: str, plan: PlanConfig, at: float) -> Invoice:
    """Open an invoice for one period of the plan's monthly fee."""
    invoice = Invoice(
        new_id("inv"), organization_id, plan.code, to_micros(plan.monthly_fee), "open", at, None
    )
    await tx.execute(
        f"INSERT INTO invoices ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        invoice.id,
        invoice.organization_id,
        invoice.plan_code,
        invoice.amount_micros,
        invoice.status,
        invoice.created_at,
        invoice.paid_at,
    )
    return invoice


async def open_invoices(ex: Executor, organization_id: str) -> list[Invoice]:
    """The organization's unpaid invoices, oldest first."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM invoices WHERE organization_id = $1 AND status = 'open'"
        " ORDER BY created_at, id",
        organization_id,
    )
    return [Invoice(**row) for row in rows]


async def billing_overview(ex: Executor, config: Config, org: Organization) -> dict[str, Any]:
    """The `billing` member of GET /api/overview: the plan, the balance and the open invoices."""
    plan = config.plan(org.plan_code)
    return {
        "currency": config.billing.currency,
        "plan": None
        if plan is None
        else {
            "code": plan.code,
            "name": plan.name or plan.code,
            "monthlyFeeMicros": to_micros(plan.monthly_fee),
            "creditLimitMicros": to_micros(plan.credit_limit),
        },
        "balanceMicros": org.balance_micros,
        "openInvoices": [invoice.to_json() for invoice in await open_invoices(ex, org.id)],
    }
