"""Money and plans of an organization: paying invoices, topping up and adjusting the balance, changing the
plan, and the billing overview.

These are operator actions (the operator API and `modelgate billing`). Money moves as balance events
(`domain.events`) written in the same transaction as the change they describe; the caller announces each
event after commit (`announce_balance_event` in-process, the CLI on the billing channel), and every gateway
applies it to its live counter once. A plan change is announced likewise (`announce_plan_change`), so
gateways drop the API keys they cached with the old plan.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.invoice_payment import invoice_with_payment
from modelgate.cabinet.invoices_repository import (
    TOP_UP_INVOICE,
    Invoice,
    insert_invoice,
    invoice_by_id,
    open_invoices,
    pay_open_invoice,
)
from modelgate.cabinet.requests import CabinetError
from modelgate.cabinet.services import CabinetServices
from modelgate.cabinet.usage_repository import day_start, request_totals
from modelgate.config import Config, PlanConfig
from modelgate.domain.allowance import grant_allowance
from modelgate.domain.audit_log import Actor, record
from modelgate.domain.events import (
    CREDIT,
    DEBIT,
    INVOICE_PAID,
    SET,
    TOP_UP,
    BalanceEvent,
    apply_balance_event,
)
from modelgate.domain.money import MAX_CREDIT_MICROS, to_micros
from modelgate.domain.organizations import (
    Organization,
    balance_of,
    billing_state,
    lock_organization,
    set_plan,
)
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor

log = logging.getLogger("modelgate.cabinet.billing")

MAX_TOP_UP_MICROS = MAX_CREDIT_MICROS
OPERATOR = Actor("operator", None, None)
ADJUSTMENT_KINDS = (CREDIT, DEBIT, SET)
MAX_REASON_LENGTH = 500


def invoice_not_found() -> CabinetError:
    return CabinetError(404, "invoice not found")


def organization_not_found() -> CabinetError:
    return CabinetError(404, "organization not found")


async def mark_invoice_paid(
    tx: Executor, invoice_id: str, at: float, *, via: str = "api"
) -> tuple[Invoice, BalanceEvent | None]:
    """Pay an open invoice: credit its amount, activate the organization, audit `invoice.paid`.

    Returns (the paid invoice, the balance event to announce after commit). Raises `CabinetError` 404
    `invoice not found`, or 409 `invoice already paid` / `invoice is void`. Call inside a transaction and
    announce the credit after commit.
    """
    changed = await pay_open_invoice(tx, invoice_id, at)
    invoice = await invoice_by_id(tx, invoice_id)
    if invoice is None:
        raise invoice_not_found()
    if not changed:
        raise CabinetError(409, "invoice already paid" if invoice.status == "paid" else "invoice is void")
    event = await apply_balance_event(
        tx,
        invoice.organization_id,
        INVOICE_PAID,
        invoice.amount_micros,
        at,
        activates=True,
        actor=f"operator:{via}",
        reference_id=invoice.id,
    )
    await record(
        tx,
        invoice.organization_id,
        "invoice.paid",
        OPERATOR,
        at,
        target_id=invoice.id,
        details={"amountMicros": invoice.amount_micros, "kind": invoice.kind, "via": via},
    )
    return invoice, event


async def settle_free_invoice(
    tx: Executor, config: Config, invoice: Invoice, actor: Actor, at: float
) -> list[BalanceEvent]:
    """What paying a 0.00 invoice means, done as it is opened: the organization is activated (and granted
    its plan's allowance) as if the operator had marked it paid; audit `invoice.paid` via `registration`.

    Returns the balance events to announce after commit; none for an invoice that owes money.
    """
    if invoice.amount_micros > 0 or invoice.status != "paid":
        return []
    paid = await apply_balance_event(
        tx,
        invoice.organization_id,
        INVOICE_PAID,
        0,
        at,
        activates=True,
        actor="registration",
        reference_id=invoice.id,
    )
    await record(
        tx,
        invoice.organization_id,
        "invoice.paid",
        actor,
        at,
        target_id=invoice.id,
        details={"amountMicros": 0, "kind": invoice.kind, "via": "registration"},
    )
    allowance = await grant_allowance(tx, config, invoice.organization_id, at)
    return [event for event in (paid, allowance) if event is not None]


def check_top_up_amount(amount_micros: Any) -> int:
    """A valid top-up amount in micro-units, or 400."""
    if isinstance(amount_micros, bool) or not isinstance(amount_micros, int):
        raise CabinetError(400, "amountMicros must be an integer")
    if not 0 < amount_micros <= MAX_TOP_UP_MICROS:
        raise CabinetError(400, f"amountMicros must be from 1 to {MAX_TOP_UP_MICROS}")
    return amount_micros


async def top_up(
    tx: Executor, organization_id: str, amount_micros: int, at: float, *, via: str = "api"
) -> tuple[Invoice, BalanceEvent | None]:
    """Credit the balance by a paid `top_up` invoice and activate the organization; audit `balance.topped_up`.

    Raises `CabinetError` 400 for an amount out of range, 404 `organization not found`. Call inside a
    transaction and announce the credit after commit.
    """
    amount_micros = check_top_up_amount(amount_micros)
    state = await billing_state(tx, organization_id)
    if state is None:
        raise organization_not_found()
    invoice = Invoice(
        new_id("inv"), organization_id, state.plan_code, amount_micros, "paid", at, at, TOP_UP_INVOICE
    )
    await insert_invoice(tx, invoice)
    event = await apply_balance_event(
        tx,
        organization_id,
        TOP_UP,
        amount_micros,
        at,
        activates=True,
        actor=f"operator:{via}",
        reference_id=invoice.id,
    )
    await record(
        tx,
        organization_id,
        "balance.topped_up",
        OPERATOR,
        at,
        target_id=invoice.id,
        details={"amountMicros": amount_micros, "via": via},
    )
    return invoice, event


@dataclass(frozen=True, slots=True)
class Adjustment:
    """An operator's change of a balance: `amount_micros` is the signed delta that was applied."""

    event: BalanceEvent
    kind: str
    requested_micros: int
    reason: str
    at: float

    def to_json(self, currency: str) -> dict[str, Any]:
        """The answer of POST /operator/organizations/{id}/adjust."""
        return {
            "id": self.event.id,
            "organizationId": self.event.organization_id,
            "kind": self.kind,
            "requestedMicros": self.requested_micros,
            "amountMicros": self.event.amount_micros,
            "balanceMicros": self.event.balance_after,
            "reason": self.reason,
            "currency": currency,
            "createdAt": isoformat(self.at),
        }


def check_adjustment(kind: Any, amount_micros: Any, reason: Any) -> tuple[str, int, str]:
    """A valid (kind, amount, reason) of an adjustment, or 400: credit and debit take a positive amount,
    set the balance to reach (which may be 0 or negative); the reason is required."""
    if not isinstance(kind, str) or kind not in ADJUSTMENT_KINDS:
        raise CabinetError(400, f"kind must be one of: {', '.join(ADJUSTMENT_KINDS)}")
    if isinstance(amount_micros, bool) or not isinstance(amount_micros, int):
        raise CabinetError(400, "amountMicros must be an integer")
    low = -MAX_CREDIT_MICROS if kind == SET else 1
    if not low <= amount_micros <= MAX_CREDIT_MICROS:
        raise CabinetError(400, f"amountMicros of a {kind} must be from {low} to {MAX_CREDIT_MICROS}")
    if not isinstance(reason, str) or not reason.strip():
        raise CabinetError(400, "reason is required")
    reason = reason.strip()
    if len(reason) > MAX_REASON_LENGTH or not reason.isprintable():
        raise CabinetError(400, f"reason must be at most {MAX_REASON_LENGTH} printable characters")
    return kind, amount_micros, reason


async def adjust_balance(
    tx: Executor,
    organization_id: str,
    kind: Any,
    amount_micros: Any,
    reason: Any,
    at: float,
    *,
    via: str = "api",
) -> Adjustment:
    """Credit, debit or set the stored balance as a balance event; audit `balance.adjusted` with the reason.

    A debit may take the balance below zero (a chargeback). `set` reads the balance in this transaction
    under the organization's row lock, so the delta it applies is exact even while the ledger flushes
    spend. Raises `CabinetError` 400 for bad input, 404 `organization not found`. Call inside a
    transaction and announce the event after commit.
    """
    kind, amount_micros, reason = check_adjustment(kind, amount_micros, reason)
    if not await lock_organization(tx, organization_id):
        raise organization_not_found()
    if kind == SET:
        delta = amount_micros - await balance_of(tx, organization_id)
    else:
        delta = amount_micros if kind == CREDIT else -amount_micros
    event = await apply_balance_event(
        tx, organization_id, kind, delta, at, reason=reason, actor=f"operator:{via}"
    )
    if event is None:
        raise organization_not_found()
    await record(
        tx,
        organization_id,
        "balance.adjusted",
        OPERATOR,
        at,
        target_id=event.id,
        details={
            "kind": kind,
            "requestedMicros": amount_micros,
            "amountMicros": delta,
            "balanceMicros": event.balance_after,
            "reason": reason,
            "via": via,
        },
    )
    return Adjustment(event, kind, amount_micros, reason, at)


async def change_plan(
    tx: Executor, config: Config, organization_id: str, plan_code: Any, at: float, *, via: str = "api"
) -> tuple[str, PlanConfig]:
    """Move an organization to another plan (any plan, a credit plan included); audit `plan.changed`.

    Returns (the previous plan code, the new plan). Raises `CabinetError` 400 for an unknown plan, 404
    `organization not found`. Call inside a transaction and tell the model API after commit
    (`announce_plan_change`): running gateways cache API keys with their plan.
    """
    if not isinstance(plan_code, str) or not plan_code:
        raise CabinetError(400, "planCode is required")
    plan = config.plan(plan_code)
    if plan is None:
        raise CabinetError(400, f"planCode must be one of: {', '.join(p.code for p in config.plans)}")
    state = await billing_state(tx, organization_id)
    if state is None:
        raise organization_not_found()
    await set_plan(tx, organization_id, plan.code)
    await record(
        tx,
        organization_id,
        "plan.changed",
        OPERATOR,
        at,
        target_id=organization_id,
        details={"from": state.plan_code, "to": plan.code, "via": via},
    )
    return state.plan_code, plan


async def announce_plan_change(services: CabinetServices, organization_id: str) -> None:
    """Tell the model API of this process (and through it every process) after commit."""
    try:
        await services.billing_sink.plan_changed(organization_id)
    except Exception:
        log.exception("billing sink failed on plan_changed for %s", organization_id)


async def announce_balance_event(services: CabinetServices, event: BalanceEvent | None) -> None:
    """Tell the model API of this process, after commit; the event is committed, so a failure is logged."""
    if event is None:
        return
    try:
        await services.billing_sink.balance_changed(event)
    except Exception as exc:  # Redis unreachable, typically: one line, not a traceback per event
        log.warning(
            "balance event %d of %s not applied to the live counters now (%r); every gateway applies it"
            " from storage once they answer",
            event.seq,
            event.organization_id,
            exc,
        )


async def billing_overview(ex: Executor, config: Config, org: Organization, at: float) -> dict[str, Any]:
    """The `billing` member of GET /api/overview: plan, balance, whether it may spend, this month's usage
    and the open invoices."""
    plan = config.plan(org.plan_code)
    state = await billing_state(ex, org.id)
    activated_at = state.activated_at if state else None
    credit_limit = to_micros(plan.credit_limit) if plan else 0
    today = datetime.fromtimestamp(at, UTC).date()
    month_start = today.replace(day=1)
    usage = await request_totals(ex, org.id, month_start, today)
    return {
        "currency": config.billing.currency,
        "plan": None
        if plan is None
        else {
            "code": plan.code,
            "name": plan.name or plan.code,
            "monthlyFeeMicros": to_micros(plan.monthly_fee),
            "creditLimitMicros": credit_limit,
        },
        "balanceMicros": state.balance_micros if state else org.balance_micros,
        "activated": activated_at is not None,
        "activatedAt": isoformat(activated_at),
        "creditLimitMicros": credit_limit,
        "canSpend": activated_at is not None or credit_limit > 0,
        "usage": {
            "since": isoformat(day_start(month_start)),
            "requests": usage.requests,
            "served": usage.requests - usage.refused,
            "refused": usage.refused,
            "errors": usage.errors,
            "costMicros": usage.cost_micros,
        },
        "openInvoices": [
            invoice_with_payment(config.billing, invoice) for invoice in await open_invoices(ex, org.id)
        ],
    }
