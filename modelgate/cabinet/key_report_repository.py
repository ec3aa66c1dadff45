"""The keys page's SQL: the organization's keys, sorted and paged, with their last use and spend read from
the usage ledger (through 0020's `(organization_id, key_id, created_at, id)` index)."""

from __future__ import annotations

from dataclasses import dataclass

from modelgate.storage.database import Executor

# The sort keys of the API and the report column each sorts by (ties broken by id).
SORTS = {
    "alias": "r.alias",
    "created": "r.created_at",
    "lastUsed": "COALESCE(r.last_used_at, 0)",
    "spendToday": "r.spend_today_micros",
    "spendMonth": "r.spend_month_micros",
    "status": "r.status",
    "owner": "r.owner_email",
}


@dataclass(frozen=True, slots=True)
class KeyActivity:
    """One key as the keys page shows it: the stored key with its use read from the ledger."""

    id: str
    alias: str
    owner_email: str
    system_id: str | None
    status: str
    created_at: float
    revoked_at: float | None
    last_used_at: float | None
    spend_today_micros: int
    spend_month_micros: int


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def key_activity_page(
    ex: Executor,
    organization_id: str,
    *,
    query: str,
    sort: str,
    descending: bool,
    limit: int,
    offset: int,
    day_start: float,
    month_start: float,
) -> tuple[int, list[KeyActivity]]:
    """The number of the organization's keys matching `query` (alias, owner, id, status) and one sorted page
    of them with their last use and spend."""

    def where(n: int) -> str:
        """The keys of the organization ($1) matching the query text (${n}), when there is one."""
        if not query:
            return "k.organization_id = $1"
        return (
            f"k.organization_id = $1 AND (LOWER(k.alias) LIKE ${n} ESCAPE '\\'"
            f" OR LOWER(k.owner_email) LIKE ${n} ESCAPE '\\' OR LOWER(k.id) LIKE ${n} ESCAPE '\\'"
            f" OR k.status LIKE ${n} ESCAPE '\\')"
        )

    text = [_like(query)] if query else []
    total = await ex.fetchval(f"SELECT COUNT(*) FROM api_keys k WHERE {where(2)}", organization_id, *text)
    args: list[object] = [organization_id, month_start, day_start, *text]
    direction = "DESC" if descending else "ASC"
    args.extend([limit, offset])
    spend = (
        "COALESCE((SELECT SUM(l.cost_micros) FROM usage_ledger l WHERE l.key_id = k.id"
        " AND l.organization_id = k.organization_id AND l.created_at >= {start}), 0)"
    )
    rows = await ex.fetch(
        "SELECT * FROM (SELECT k.id, k.alias, k.owner_email, k.system_id, k.status, k.created_at,"
        " k.revoked_at,"
        " (SELECT MAX(l.created_at) FROM usage_ledger l WHERE l.key_id = k.id"
        " AND l.organization_id = k.organization_id) AS last_used_at,"
        f" {spend.format(start='$3')} AS spend_today_micros, {spend.format(start='$2')} AS spend_month_micros"
        f" FROM api_keys k WHERE {where(4)}) r"
        f" ORDER BY {SORTS[sort]} {direction}, r.id {direction} LIMIT ${len(args) - 1} OFFSET ${len(args)}",
        *args,
    )
    keys = [
        KeyActivity(
            **{
                **row,
                "spend_today_micros": int(row["spend_today_micros"]),
                "spend_month_micros": int(row["spend_month_micros"]),
            }
        )
        for row in rows
    ]
    return int(total or 0), keys
