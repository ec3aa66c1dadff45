"""Balance events: credits, payments and operator adjustments, applied once everywhere.

A stored balance changes in two ways only: metered spend (the ledger flush) and balance events. An event
is written in the same transaction as the balance change it describes, with the organization's next
`credit_seq`. Live counters (in-process or in Redis) are built from `balance_micros` and `credit_seq` read
together, then fold in each announced event whose sequence is newer and not yet applied: no event is lost
when a counter is busy, and none is counted twice when it arrives more than once.

This module writes and reads the `balance_events` table; the balance itself changes through
`domain.organizations`.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.domain.money import Micros
from modelgate.domain.organizations import change_balance
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor

# Kinds of balance events.
INVOICE_PAID = "invoice_paid"
TOP_UP = "top_up"
CREDIT = "credit"
DEBIT = "debit"
SET = "set"
ALLOWANCE = "allowance"
EVENT_KINDS = (INVOICE_PAID, TOP_UP, CREDIT, DEBIT, SET, ALLOWANCE)


@dataclass(frozen=True, slots=True)
class BalanceEvent:
    """One committed change of an organization's stored balance (`amount_micros` is signed)."""

    id: str
    organization_id: str
    seq: int
    kind: str
    amount_micros: Micros
    activates: bool
    balance_after: Micros = 0

    def payload(self) -> str:
        """The broadcast form: `org|amount|event id|seq|activates`."""
        return f"{self.organization_id}|{self.amount_micros}|{self.id}|{self.seq}|{int(self.activates)}"

    @classmethod
    def parse(cls, payload: str) -> BalanceEvent | None:
        """An event from its broadcast form; None for anything else (an old bare organization id)."""
        parts = payload.split("|")
        if len(parts) != 5:
            return None
        organization_id, amount, event_id, seq, activates = parts
        try:
            return cls(event_id, organization_id, int(seq), "", int(amount), activates == "1")
        except ValueError:
            return None


async def apply_balance_event(
    tx: Executor,
    organization_id: str,
    kind: str,
    amount_micros: Micros,
    at: float,
    *,
    activates: bool = False,
    reason: str = "",
    actor: str = "",
    reference_id: str | None = None,
    event_id: str | None = None,
) -> BalanceEvent | None:
    """Change the stored balance by `amount_micros` and record the event; call inside a transaction and
    announce the returned event after commit. None when the organization does not exist.

    A given `event_id` makes the event idempotent: applying it again changes nothing and returns None.
    """
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown balance event kind: {kind}")
    event_id = event_id or new_id("bev")
    if await tx.fetchval("SELECT 1 FROM balance_events WHERE id = $1", event_id):
        return None
    change = await change_balance(tx, organization_id, amount_micros, at, activates=activates)
    if change is None:
        return None
    await tx.execute(
        "INSERT INTO balance_events (id, organization_id, seq, kind, amount_micros, activates, reason, actor,"
        " reference_id, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        event_id,
        organization_id,
        change.seq,
        kind,
        amount_micros,
        int(activates),
        reason,
        actor,
        reference_id,
        at,
    )
    return BalanceEvent(
        event_id, organization_id, change.seq, kind, amount_micros, activates, change.balance_micros
    )


async def balance_events_since(ex: Executor, since: float) -> list[tuple[BalanceEvent, float]]:
    """The stored events created after `since`, oldest first, each with its creation time (the kind is
    left empty: applying an event needs only its amount, sequence and activation)."""
    rows = await ex.fetch(
        "SELECT id, organization_id, seq, amount_micros, activates, created_at"
        " FROM balance_events WHERE created_at > $1 ORDER BY created_at",
        since,
    )
    return [
        (
            BalanceEvent(
                row["id"],
                row["organization_id"],
                row["seq"],
                "",
                row["amount_micros"],
                bool(row["activates"]),
            ),
            row["created_at"],
        )
        for row in rows
    ]
