"""The usage ledger as the cabinet reads it: sums of an organization's rows (`UsageTotals`) over a time range,
whole or grouped by UTC day, model, key or system. The cabinet's sums of `usage_ledger` (the model API
writes it: `modelgate/domain/ledger.py`; its rows one by one are read by
`modelgate/cabinet/request_log_repository.py`); the report handler is in `modelgate/cabinet/usage.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from modelgate.cabinet.request_log_repository import REFUSED_STATUSES
from modelgate.storage.database import Database, Executor, Row

SECONDS_PER_DAY = 86400
_REFUSED = f"status IN ({', '.join(str(s) for s in REFUSED_STATUSES)})"
# Requests, refused and failed ones, and cost: the columns the index by organization and time holds.
_COUNTS = (
    "COUNT(*) AS requests, COALESCE(SUM(cost_micros), 0) AS cost_micros,"
    f" COALESCE(SUM(CASE WHEN {_REFUSED} THEN 1 ELSE 0 END), 0) AS refused,"
    f" COALESCE(SUM(CASE WHEN (status >= 400 OR status = 0) AND NOT {_REFUSED} THEN 1 ELSE 0 END), 0)"
    " AS errors"
)
_SUMS = (
    f"{_COUNTS}, COALESCE(SUM(input_tokens), 0) AS input_tokens,"
    " COALESCE(SUM(cached_input_tokens), 0) AS cached_input_tokens,"
    " COALESCE(SUM(output_tokens), 0) AS output_tokens"
)
# The column each grouping sums by (`day` is computed, see `_day_number`).
_GROUP_COLUMNS = {"model": "model", "key": "key_id", "system": "system_id"}


@dataclass(frozen=True, slots=True)
class UsageFilter:
    """Which ledger rows a usage report sums: all of the organization's, or one key's, one model's or both."""

    key_id: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Requests, tokens and cost summed over some ledger rows; of the requests, how many the gateway refused
    (402, 403, 429) and how many of the others failed (another 4xx or 5xx status, or never answered)."""

    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    refused: int = 0
    errors: int = 0

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_micros + other.cost_micros,
            self.refused + other.refused,
            self.errors + other.errors,
        )

    def to_json(self) -> dict[str, int]:
        """The usage numbers of the API (`served` = requests - refused)."""
        return {
            "requests": self.requests,
            "served": self.requests - self.refused,
            "refused": self.refused,
            "errors": self.errors,
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
        int(row["refused"]),
        int(row["errors"]),
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


async def request_totals(ex: Executor, organization_id: str, start: float, end: float) -> UsageTotals:
    """The organization's requests (served, refused, failed) and cost in [start, end) epoch seconds; tokens
    are not summed (0), so the sum reads the index by organization and time alone (migration 0020)."""
    row = await ex.fetchrow(
        f"SELECT {_COUNTS} FROM usage_ledger"
        " WHERE organization_id = $1 AND created_at >= $2 AND created_at < $3",
        organization_id,
        start,
        end,
    )
    if row is None:
        return UsageTotals()
    return UsageTotals(
        requests=int(row["requests"]),
        cost_micros=int(row["cost_micros"]),
        refused=int(row["refused"]),
        errors=int(row["errors"]),
    )


async def usage_breakdown(
    db: Database,
    organization_id: str,
    first: date,
    last: date,
    group_by: str,
    then: str,
    only: UsageFilter | None = None,
) -> dict[str | None, list[tuple[str | None, UsageTotals]]]:
    """The organization's usage over first..last split by `group_by` and, inside each group, by `then` (one
    query): {group: [(sub-group, totals), costliest first]}, groups as `usage_by` names them."""
    rows = await _grouped(db, organization_id, first, last, group_by, then, only)
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
    db: Database,
    organization_id: str,
    first: date,
    last: date,
    group_by: str,
    then: str | None = None,
    only: UsageFilter | None = None,
) -> list:
    """The sums of the organization's ledger over first..last by `bucket` (the day number or the grouping's
    column) and, with `then`, by `part` too, of the rows `only` lets through: one query, summed in the
    database."""
    column = _day_number(db.dialect) if group_by == "day" else _GROUP_COLUMNS[group_by]
    part = f", {_GROUP_COLUMNS[then]} AS part" if then else ""
    args: list[object] = [organization_id, day_start(first), day_start(last + timedelta(days=1))]
    where = ""
    for name, value in (("key_id", only and only.key_id), ("model", only and only.model)):
        if value:
            args.append(value)
            where += f" AND {name} = ${len(args)}"
    return await db.fetch(
        f"SELECT {column} AS bucket{part}, {_SUMS} FROM usage_ledger"
        f" WHERE organization_id = $1 AND created_at >= $2 AND created_at < $3{where}"
        f" GROUP BY {'1, 2' if then else '1'}",
        *args,
    )


def _costliest_first(item: tuple[str | None, UsageTotals]) -> tuple:
    return (-item[1].cost_micros, -item[1].requests, item[0] is None, item[0] or "")


async def usage_by(
    db: Database,
    organization_id: str,
    first: date,
    last: date,
    group_by: str,
    only: UsageFilter | None = None,
) -> list[tuple[str | None, UsageTotals]]:
    """The organization's usage over the UTC days first..last (inclusive), one entry per group.

    By `day` every day of the range is listed (zeros included), oldest first; otherwise the groups that
    had usage, costliest first. Keys and systems are ids (None for ledger rows without one).
    """
    rows = await _grouped(db, organization_id, first, last, group_by, only=only)
    found = {row["bucket"]: _totals(row) for row in rows}
    if group_by == "day":
        epoch = date(1970, 1, 1)
        days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        return [(d.isoformat(), found.get((d - epoch).days, UsageTotals())) for d in days]
    return sorted(found.items(), key=_costliest_first)
