"""Usage of the model API as the cabinet reports it, read from the usage ledger of the organization.

GET /usage sums the ledger by UTC day, model, key or system over a range of whole UTC days.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from aiohttp import web

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.requests import bad_request, json_response, refuse_unstorable_query
from modelgate.cabinet.services import services_of
from modelgate.storage.database import Database, Executor, Row

GROUPINGS = ("day", "model", "key", "system")
QUERY_PARAMETERS = ("from", "to", "groupBy")
DEFAULT_DAYS = 30
MAX_DAYS = 366
SECONDS_PER_DAY = 86400
# The ledger starts after the epoch; the upper bound keeps date arithmetic clear of `date.max`.
FIRST_DAY = date(1970, 1, 1)
LAST_DAY = date(9998, 12, 31)
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_SUMS = (
    "COUNT(*) AS requests, COALESCE(SUM(input_tokens), 0) AS input_tokens,"
    " COALESCE(SUM(cached_input_tokens), 0) AS cached_input_tokens,"
    " COALESCE(SUM(output_tokens), 0) AS output_tokens, COALESCE(SUM(cost_micros), 0) AS cost_micros"
)
# The column each grouping sums by (`day` is computed, see `_day_number`) and its name in the API.
_GROUP_COLUMNS = {
    "model": ("model", "model"),
    "key": ("key_id", "keyId"),
    "system": ("system_id", "systemId"),
}


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


async def usage_by(
    db: Database, organization_id: str, first: date, last: date, group_by: str
) -> list[tuple[str | None, UsageTotals]]:
    """The organization's usage over the UTC days first..last (inclusive), one entry per group.

    By `day` every day of the range is listed (zeros included), oldest first; otherwise the groups that
    had usage, costliest first. Keys and systems are ids (None for ledger rows without one).
    """
    if group_by == "day":
        column = _day_number(db.dialect)
    else:
        column = _GROUP_COLUMNS[group_by][0]
    rows = await db.fetch(
        f"SELECT {column} AS bucket, {_SUMS} FROM usage_ledger"
        " WHERE organization_id = $1 AND created_at >= $2 AND created_at < $3 GROUP BY 1",
        organization_id,
        day_start(first),
        day_start(last + timedelta(days=1)),
    )
    found = {row["bucket"]: _totals(row) for row in rows}
    if group_by == "day":
        epoch = date(1970, 1, 1)
        days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        return [(d.isoformat(), found.get((d - epoch).days, UsageTotals())) for d in days]
    return sorted(
        found.items(),
        key=lambda item: (-item[1].cost_micros, -item[1].requests, item[0] is None, item[0] or ""),
    )


def _query_date(request: web.Request, name: str) -> date | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        if not _DATE.match(raw):
            raise ValueError(raw)
        day = date.fromisoformat(raw)
    except ValueError as exc:
        raise bad_request(f"{name} must be a date YYYY-MM-DD") from exc
    if not FIRST_DAY <= day <= LAST_DAY:
        raise bad_request(f"{name} must be between {FIRST_DAY} and {LAST_DAY}")
    return day


def report_range(request: web.Request, today: date) -> tuple[date, date, str]:
    """The validated (from, to, groupBy) of a usage query; by default the last 30 days by day."""
    refuse_unstorable_query(request)
    for name in request.query:
        if name not in QUERY_PARAMETERS:
            raise bad_request(f"unknown query parameter: {name}; use {', '.join(QUERY_PARAMETERS)}")
        if len(request.query.getall(name)) > 1:
            raise bad_request(f"{name} may be given only once")
    group_by = request.query.get("groupBy") or "day"
    if group_by not in GROUPINGS:
        raise bad_request(f"groupBy must be one of: {', '.join(GROUPINGS)}")
    last = _query_date(request, "to") or today
    first = _query_date(request, "from") or last - timedelta(days=DEFAULT_DAYS - 1)
    if first > last:
        raise bad_request("from must not be after to")
    if (last - first).days + 1 > MAX_DAYS:
        raise bad_request(f"the range from..to may span at most {MAX_DAYS} days")
    return first, last, group_by


async def usage_report(request: web.Request) -> web.Response:
    """GET /usage?from=&to=&groupBy= → usage rows of the caller's organization and their totals (any role)."""
    services = services_of(request)
    principal = await authenticate(request)
    first, last, group_by = report_range(request, datetime.now(UTC).date())
    groups = await usage_by(services.db, principal.organization_id, first, last, group_by)
    name = "day" if group_by == "day" else _GROUP_COLUMNS[group_by][1]
    rows: list[dict[str, Any]] = [{name: group, **totals.to_json()} for group, totals in groups]
    totals = sum((totals for _, totals in groups), UsageTotals())
    return json_response(
        {
            "from": first.isoformat(),
            "to": last.isoformat(),
            "groupBy": group_by,
            "currency": services.config.billing.currency,
            "rows": rows,
            "totals": totals.to_json(),
        }
    )
