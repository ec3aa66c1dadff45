"""The usage ledger as the cabinet reads it: sums of an organization's rows (`UsageTotals`) over a time range,
whole or grouped by UTC day, model, key or system. Every report covers whole UTC days and reads the ledger's
daily sums (`usage_days`, added by the ledger's flush in the rows' own transaction:
`modelgate/domain/usage_days.py`), a few rows per day and model instead of every request. The model API writes
the ledger (`modelgate/domain/ledger.py`); its rows one by one are read by
`modelgate/cabinet/request_log_repository.py`; the report handler is in `modelgate/cabinet/usage.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from modelgate.domain.usage_days import NO_ID
from modelgate.storage.database import Database, Executor, Row

# The sums of usage_days' rows.
_DAY_SUMS = (
    "SUM(requests) AS requests, SUM(cost_micros) AS cost_micros, SUM(refused) AS refused,"
    " SUM(errors) AS errors, SUM(input_tokens) AS input_tokens,"
    " SUM(cached_input_tokens) AS cached_input_tokens, SUM(output_tokens) AS output_tokens"
)
# The column of usage_days each grouping sums by.
_GROUP_COLUMNS = {"day": "day", "model": "model", "key": "key_id", "system": "system_id"}


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


async def request_totals(ex: Executor, organization_id: str, first: date, last: date) -> UsageTotals:
    """The organization's requests (served, refused, failed), tokens and cost over the UTC days first..last
    (inclusive), from the daily sums: the overview's month is at most 31 days of a few rows each."""
    epoch = date(1970, 1, 1)
    row = await ex.fetchrow(
        f"SELECT {_DAY_SUMS} FROM usage_days WHERE organization_id = $1 AND day >= $2 AND day <= $3",
        organization_id,
        (first - epoch).days,
        (last - epoch).days,
    )
    if row is None or row["requests"] is None:  # SUM of no rows is NULL
        return UsageTotals()
    return _totals(row)


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
) -> list[Row]:
    """The sums of the organization's ledger over first..last by `bucket` (the day number or the grouping's
    column) and, with `then`, by `part` too, of the rows `only` lets through: one query of the daily sums
    (usage_days' primary key leads with the organization and the day), a key or system of None as None."""
    epoch = date(1970, 1, 1)
    args: list[object] = [organization_id, (first - epoch).days, (last - epoch).days]
    where = ""
    for name, value in (("key_id", only and only.key_id), ("model", only and only.model)):
        if value:
            args.append(value)
            where += f" AND {name} = ${len(args)}"
    part = f", {_GROUP_COLUMNS[then]} AS part" if then else ""
    rows = await db.fetch(
        f"SELECT {_GROUP_COLUMNS[group_by]} AS bucket{part}, {_DAY_SUMS} FROM usage_days"
        f" WHERE organization_id = $1 AND day >= $2 AND day <= $3{where}"
        f" GROUP BY {'1, 2' if then else '1'}",
        *args,
    )
    for row in rows:
        for name in ("bucket", "part"):
            if row.get(name) == NO_ID:
                row[name] = None
    return rows


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
