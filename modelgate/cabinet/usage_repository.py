"""The usage ledger as the cabinet reads it: sums of an organization's rows (`UsageTotals`) over a time range,
whole or grouped by UTC day, model, key or system. The only SQL of the cabinet on `usage_ledger` (the model
API writes it: `modelgate/domain/ledger.py`); the report handler is in `modelgate/cabinet/usage.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from modelgate.storage.database import Database, Executor, Row

SECONDS_PER_DAY = 86400
_SUMS = (
    "COUNT(*) AS requests, COALESCE(SUM(input_tokens), 0) AS input_tokens,"
    " COALESCE(SUM(cached_input_tokens), 0) AS cached_input_tokens,"
    " COALESCE(SUM(output_tokens), 0) AS output_tokens, COALESCE(SUM(cost_micros), 0) AS cost_micros"
)
# The column each grouping sums by (`day` is computed, see `_day_number`).
_GROUP_COLUMNS = {"model": "model", "key": "key_id", "system": "system_id"}


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Requests, tokens and cost summed over some ledger rows."""

    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_micros + other.cost_micros,
        )

    def to_json(self) -> dict[str, int]:
        """The usage numbers of the API."""
        return {
            "requests": self.requests,
            "inputTokens": self.input_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "outputTokens": self.output_tokens,
            "costMicros": self.cost_micros,
        }


def _totals(row: Row) -> UsageTotals:
    # PostgreSQL sums BIGINTs as NUMERIC (Decimal); int() makes both backends alike.
    return UsageTotals(
        int(row["requests"]),
        int(row["input_tokens"]),
        int(row["cached_input_tokens"]),
        int(row["output_tokens"]),
        int(row["cost_micros"]),
    )


def day_start(day: date) -> float:
    """The epoch second at which a UTC day begins."""
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def _day_number(dialect: str) -> str:
    # The UTC day of created_at as whole days since the epoch. SQLite truncates a positive REAL with CAST;
    # PostgreSQL's CAST rounds, so it needs FLOOR (which not every SQLite build has).
    if dialect == "postgres":
        return f"CAST(FLOOR(created_at / {SECONDS_PER_DAY}) AS BIGINT)"
    return f"CAST(created_at / {SECONDS_PER_DAY} AS INTEGER)"


async def usage_totals(ex: Executor, organization_id: str, start: float, end: float) -> UsageTotals:
    """The organization's usage in [start, end) epoch seconds."""
    row = await ex.fetchrow(
        f"SELECT {_SUMS} FROM usage_ledger"
        " WHERE organization_id = $1 AND created_at >= $2 AND created_at < $3",
        organization_id,
        start,
        end,
    )
    return _totals(row) if row else UsageTotals()


async def usage_breakdown(
    db: Database, organization_id: str, first: date, last: date, group_by: str, then: str
) -> dict[str | None, list[tuple[str | None, UsageTotals]]]:
    """The organization's usage over first..last split by `group_by` and, inside each group, by `then` (one
    query): {group: [(sub-group, totals), costliest first]}, groups as `usage_by` names them."""
    rows = await _grouped(db, organization_id, first, last, group_by, then)
    epoch = date(1970, 1, 1)
    found: dict[str | None, list[tuple[str | None, UsageTotals]]] = {}
    for row in rows:
        bucket = row["bucket"]
        if group_by == "day":
            bucket = (epoch + timedelta(days=int(bucket))).isoformat()
        found.setdefault(bucket, []).append((row["part"], _totals(row)))
    for parts in found.values():
        parts.sort(key=_costliest_first)
    return found


async def _grouped(
    db: Database, organization_id: str, first: date, last: date, group_by: str, then: str | None = None
) -> list:
    """The sums of the organization's ledger over first..last by `bucket` (the day number or the grouping's
    column) and, with `then`, by `part` too: one query, summed in the database."""
    column = _day_number(db.dialect) if group_by == "day" else _GROUP_COLUMNS[group_by]
    part = f", {_GROUP_COLUMNS[then]} AS part" if then else ""
    return await db.fetch(
        f"SELECT {column} AS bucket{part}, {_SUMS} FROM usage_ledger"
        " WHERE organization_id = $1 AND created_at >= $2 AND created_at < $3"
        f" GROUP BY {'1, 2' if then else '1'}",
        organization_id,
        day_start(first),
        day_start(last + timedelta(days=1)),
    )


def _costliest_first(item: tuple[str | None, UsageTotals]) -> tuple:
    return (-item[1].cost_micros, -item[1].requests, item[0] is None, item[0] or "")


async def usage_by(
    db: Database, organization_id: str, first: date, last: date, group_by: str
) -> list[tuple[str | None, UsageTotals]]:
    """The organization's usage over the UTC days first..last (inclusive), one entry per group.

    By `day` every day of the range is listed (zeros included), oldest first; otherwise the groups that
    had usage, costliest first. Keys and systems are ids (None for ledger rows without one).
    """
    rows = await _grouped(db, organization_id, first, last, group_by)
    found = {row["bucket"]: _totals(row) for row in rows}
    if group_by == "day":
        epoch = date(1970, 1, 1)
        days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        return [(d.isoformat(), found.get((d - epoch).days, UsageTotals())) for d in days]
    return sorted(found.items(), key=_costliest_first)
