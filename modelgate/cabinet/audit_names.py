"""The names beside the ids of audit entries: a key's alias, a system's or a management key's name, a
member's e-mail, a rule's description — read for one page of entries in one query, from
the caller's organization only (an id of another organization stays without a name)."""

from __future__ import annotations

import re
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


# What `new_id` makes; a details value of this shape (`systemId`, `subjectId`, `userId`, …) is an id too.
_ID = re.compile(r"^[a-z]{1,16}_[0-9a-f]{8,64}$")


def referenced_ids(entries: Iterable[AuditEntry]) -> list[str]:
    """Every id the entries reference (target, key, system, actor, and ids among the details' values), each
    once."""
    found: dict[str, None] = {}
    for entry in entries:
        named = (entry.target_id, entry.key_id, entry.system_id, entry.actor.id)
        in_details = (v for v in entry.details.values() if isinstance(v, str) and _ID.match(v))
        for value in (*named, *in_details):
            if value:
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
