"""Organizations as stored, with their plan and balance: the records and their repository.

The only SQL on `organizations` outside the ledger's flush of metered spend (`modelgate/domain/ledger.py`).
The cabinet creates organizations and changes their plan (`modelgate/cabinet/registration.py`,
`modelgate/cabinet/billing.py`); balance events change the balance (`modelgate/domain/events.py`); the model
API reads the stored balance to build its live counter (`modelgate/domain/accounts.py`) and grants monthly
allowances (`modelgate/domain/allowance.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.domain.money import Micros
from modelgate.domain.tokens import new_id
from modelgate.storage.database import Executor

_COLUMNS = "id, legal_name, plan_code, balance_micros, created_at"


@dataclass(frozen=True, slots=True)
class Organization:
    """A customer of the gateway: its members, keys, systems and invoices belong to it."""

    id: str
    legal_name: str
    plan_code: str
    balance_micros: int
    created_at: float


@dataclass(frozen=True, slots=True)
class BillingState:
    """What decides whether an organization may spend: its plan, balance and activation."""

    organization_id: str
    plan_code: str
    balance_micros: int
    activated_at: float | None

    @property
    def activated(self) -> bool:
        """Whether a first invoice (or top-up) was paid."""
        return self.activated_at is not None


@dataclass(frozen=True, slots=True)
class StoredBalance:
    """The stored balance with the sequence number of the last balance event folded into it."""

    balance_micros: Micros
    activated: bool
    credit_seq: int


@dataclass(frozen=True, slots=True)
class BalanceChange:
    """A balance change as stored: the event sequence it took and the balance after it."""

    seq: int
    balance_micros: Micros


async def insert_organization(tx: Executor, legal_name: str, plan_code: str, at: float) -> Organization:
    """Create an organization with a zero balance."""
    org = Organization(new_id("org"), legal_name, plan_code, 0, at)
    await tx.execute(
        f"INSERT INTO organizations ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5)",
        org.id,
        org.legal_name,
        org.plan_code,
        org.balance_micros,
        org.created_at,
    )
    return org


async def organization_by_id(ex: Executor, organization_id: str) -> Organization | None:
    """The organization, or None when its row is gone."""
    row = await ex.fetchrow(f"SELECT {_COLUMNS} FROM organizations WHERE id = $1", organization_id)
    return Organization(**row) if row else None


async def lock_organization(tx: Executor, organization_id: str) -> bool:
    """Write-lock the organization's row for the rest of the transaction; False when there is no such row.

    A no-op UPDATE locks on both backends (FOR UPDATE does not exist on SQLite); it serialises changes such
    as "is this the last owner?" or a balance `set` within one organization.
    """
    return bool(
        await tx.execute("UPDATE organizations SET legal_name = legal_name WHERE id = $1", organization_id)
    )


async def billing_state(ex: Executor, organization_id: str) -> BillingState | None:
    """The organization's billing state, or None when it does not exist."""
    row = await ex.fetchrow(
        "SELECT id AS organization_id, plan_code, balance_micros, activated_at FROM organizations"
        " WHERE id = $1",
        organization_id,
    )
    return BillingState(**row) if row else None


async def stored_balance(ex: Executor, organization_id: str) -> StoredBalance | None:
    """The stored balance, activation and event sequence, read together; None when there is no such row."""
    row = await ex.fetchrow(
        "SELECT balance_micros, activated_at, credit_seq FROM organizations WHERE id = $1", organization_id
    )
    if row is None:
        return None
    return StoredBalance(row["balance_micros"], row["activated_at"] is not None, row["credit_seq"])


async def balance_of(tx: Executor, organization_id: str) -> Micros:
    """The stored balance of an existing organization (read under its row lock to act on it)."""
    return int(await tx.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", organization_id))


async def set_plan(tx: Executor, organization_id: str, plan_code: str) -> None:
    """Move the organization to another plan."""
    await tx.execute("UPDATE organizations SET plan_code = $2 WHERE id = $1", organization_id, plan_code)


async def change_balance(
    tx: Executor, organization_id: str, amount_micros: Micros, at: float, *, activates: bool
) -> BalanceChange | None:
    """Add `amount_micros` (signed) to the stored balance, take the next event sequence and, with
    `activates`, activate the organization at `at` if it is not yet; None when there is no such
    organization."""
    # One atomic UPDATE takes the row lock: concurrent events get distinct, ordered sequence numbers, and
    # concurrent ledger flushes subtract from the same column without lost updates.
    row = await tx.fetchrow(
        "UPDATE organizations SET balance_micros = balance_micros + $2, credit_seq = credit_seq + 1,"
        " activated_at = CASE WHEN $4 THEN COALESCE(activated_at, $3) ELSE activated_at END"
        " WHERE id = $1 RETURNING credit_seq, balance_micros",
        organization_id,
        amount_micros,
        at,
        activates,
    )
    return BalanceChange(row["credit_seq"], row["balance_micros"]) if row else None


async def activated_without_event(
    ex: Executor, plan_codes: list[str], event_prefix: str, event_suffix: str
) -> list[str]:
    """Activated organizations on one of `plan_codes` with no balance event whose id is
    `event_prefix + organization id + event_suffix` (an allowance not yet granted), by id."""
    placeholders = ", ".join(f"${index}" for index in range(3, len(plan_codes) + 3))
    rows = await ex.fetch(
        "SELECT o.id FROM organizations o WHERE o.activated_at IS NOT NULL"
        f" AND o.plan_code IN ({placeholders}) AND NOT EXISTS (SELECT 1 FROM balance_events e"
        " WHERE e.id = CAST($1 AS TEXT) || o.id || CAST($2 AS TEXT)) ORDER BY o.id",
        event_prefix,
        event_suffix,
        *plan_codes,
    )
    return [row["id"] for row in rows]


async def members_create_keys(ex: Executor, organization_id: str) -> bool:
    """Whether members (not only owners and admins) may create their own API keys (off by default)."""
    value = await ex.fetchval("SELECT members_create_keys FROM organizations WHERE id = $1", organization_id)
    return bool(value)


async def set_members_create_keys(tx: Executor, organization_id: str, allowed: bool) -> None:
    """Let members create their own API keys, or stop them."""
    await tx.execute(
        "UPDATE organizations SET members_create_keys = $2 WHERE id = $1", organization_id, allowed
    )
