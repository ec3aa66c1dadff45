"""The names beside the ids of audit entries: a key's alias, a system's or a management key's name, a
member's e-mail, a rule's description — read for one page of entries in one query, from
the caller's organization only (an id of another organization stays without a name)."""

from __future__ import annotations

from collections.abc import Iterable

from modelgate.domain.audit_log import AuditEntry
from modelgate.storage.database import Executor

# (table, the column that names a row). A rule's name is its description; one without stays unnamed.
_NAMED = (
    ("api_keys", "alias"),
    ("systems", "name"),
    ("policy_rules", "description"),
    ("users", "email"),
    ("management_keys", "name"),
)


def referenced_ids(entries: Iterable[AuditEntry]) -> list[str]:
    """Every id the entries reference (target, key, system, actor, and a rule's subject), each once."""
    found: dict[str, None] = {}
    for entry in entries:
        subject = entry.details.get("subjectId")
        for value in (entry.target_id, entry.key_id, entry.system_id, entry.actor.id, subject):
            if isinstance(value, str) and value:
                found[value] = None
    return list(found)


async def names_of(ex: Executor, organization_id: str, ids: list[str]) -> dict[str, str]:
    """id → name for those of `ids` that name a row of the organization with a non-empty name."""
    if not ids:
        return {}
    marks = ", ".join(f"${n}" for n in range(2, len(ids) + 2))
    query = " UNION ALL ".join(
        f"SELECT id, {column} AS name FROM {table} WHERE organization_id = $1 AND id IN ({marks})"
        for table, column in _NAMED
    )
    rows = await ex.fetch(query, organization_id, *ids)
    return {row["id"]: row["name"] for row in rows if row["name"]}
