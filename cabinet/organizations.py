"""Organizations (the tenants of the cabinet) and their storage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.requests import bad_request
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

    def to_json(self) -> dict[str, Any]:
        """The organization object of the API."""
        return {
            "id": self.id,
            "legalName": self.legal_name,
            "planCode": self.plan_code,
            "createdAt": isoformat(self.created_at),
        }


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


async def require_organization(ex: Executor, organization_id: str, *, lock: bool = False) -> Organization:
    """The caller's organization, or 400 `organization not found`.

    With `lock`, the row is write-locked for the rest of the transaction (a no-op UPDATE works on both
    backends), which serialises changes such as "is this the last owner?" within one organization.
    """
    if lock:
        await ex.execute("UPDATE organizations SET legal_name = legal_name WHERE id = $1", organization_id)
    org = await organization_by_id(ex, organization_id)
    if org is None:
        raise bad_request("organization not found")
    return org
