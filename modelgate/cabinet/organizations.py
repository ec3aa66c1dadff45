"""Organizations (the tenants of the cabinet) as handlers see them: the caller's organization, or 400."""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.requests import bad_request
from modelgate.domain.organizations import Organization, lock_organization, organization_by_id
from modelgate.domain.organizations import insert_organization as insert_organization  # re-exported
from modelgate.storage.database import Executor


def organization_json(org: Organization) -> dict[str, Any]:
    """The organization object of the API."""
    return {
        "id": org.id,
        "legalName": org.legal_name,
        "planCode": org.plan_code,
        "createdAt": isoformat(org.created_at),
    }


async def require_organization(ex: Executor, organization_id: str, *, lock: bool = False) -> Organization:
    """The caller's organization, or 400 `organization not found`.

    With `lock`, the row is write-locked for the rest of the transaction, which serialises changes such as
    "is this the last owner?" within one organization.
    """
    if lock:
        await lock_organization(ex, organization_id)
    org = await organization_by_id(ex, organization_id)
    if org is None:
        raise bad_request("organization not found")
    return org
