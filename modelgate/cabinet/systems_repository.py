"""Systems as stored: the `System` record and the only SQL on `systems`.

Every read by id is scoped to an organization: another organization's system reads exactly like an unknown
one. The handlers are in `modelgate/cabinet/systems.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelgate.cabinet.clock import isoformat
from modelgate.storage.database import Executor

_COLUMNS = "id, organization_id, name, description, created_at"


@dataclass(frozen=True, slots=True)
class System:
    """An information system or agent; its name is unique within the organization."""

    id: str
    organization_id: str
    name: str
    description: str
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The system object of the API."""
        return {
            "id": self.id,
            "organizationId": self.organization_id,
            "name": self.name,
            "description": self.description,
            "createdAt": isoformat(self.created_at),
        }


async def system_in_organization(ex: Executor, organization_id: str, system_id: str) -> System | None:
    """A system of this organization; another organization's system is None, exactly like an unknown id."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS} FROM systems WHERE id = $1 AND organization_id = $2", system_id, organization_id
    )
    return System(**row) if row else None


async def systems_of(ex: Executor, organization_id: str) -> list[System]:
    """The organization's systems by name."""
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM systems WHERE organization_id = $1 ORDER BY name, id", organization_id
    )
    return [System(**r) for r in rows]


async def name_in_use(ex: Executor, organization_id: str, name: str, other_than: str = "") -> bool:
    """Whether another system of the organization (any but `other_than`) has this name."""
    found = await ex.fetchval(
        "SELECT 1 FROM systems WHERE organization_id = $1 AND name = $2 AND id <> $3",
        organization_id,
        name,
        other_than,
    )
    return found is not None


async def insert_system(tx: Executor, system: System) -> None:
    """Store a new system; a name taken concurrently raises `IntegrityViolation`."""
    await tx.execute(
        f"INSERT INTO systems ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5)",
        system.id,
        system.organization_id,
        system.name,
        system.description,
        system.created_at,
    )


async def update_system(tx: Executor, system: System) -> None:
    """Store a system's name and description."""
    await tx.execute(
        "UPDATE systems SET name = $1, description = $2 WHERE id = $3",
        system.name,
        system.description,
        system.id,
    )


async def delete_system(tx: Executor, system_id: str) -> None:
    """Delete a system (its keys unlinked and no policy rule naming it: the handler checks)."""
    await tx.execute("DELETE FROM systems WHERE id = $1", system_id)
