"""The usage ledger row by row, as the cabinet's request log reads it: one organization's rows, newest first,
filtered and paged by keyset on (created_at, id). The handlers are in `modelgate/cabinet/request_log.py`; the
model API writes the rows (`modelgate/domain/ledger.py`).

Every query starts at an index that leads with the organization and ends in the page order (migrations 0020
and 0025): by key, by model, by status, by outcome, by system or, without those filters, by time; the page
then walks the index backwards from the cursor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from modelgate.domain.usage_days import REFUSED_STATUSES
from modelgate.storage.database import Executor, Row

_COLUMNS = (
    "id, key_id, system_id, model, row_key, request_id, status, outcome, input_tokens, cached_input_tokens,"
    " output_tokens, units, cost_micros, created_at, content_action, usage_estimated,"
    " over_reservation_micros, usage_implausible"
)
# A ledger id made by `LedgerWriter.new_row_id`: `led_`, the admission time in milliseconds (11 hex digits),
# then the writer and a counter.
_LEDGER_ID = re.compile(r"^led_([0-9a-f]{11})[0-9a-f]{24}$")


@dataclass(frozen=True, slots=True)
class RequestFilter:
    """Which of an organization's ledger rows a page holds: all, or those matching every field given."""

    start: float | None = None  # epoch seconds, inclusive
    end: float | None = None  # epoch seconds, exclusive
    key_id: str | None = None
    system_id: str | None = None
    model: str | None = None
    status: int | None = None
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One ledger row: one request of the model API (or one response of a realtime session)."""

    id: str
    key_id: str | None
    system_id: str | None
    model: str
    row_key: str | None
    request_id: str
    status: int
    outcome: str
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    units: float
    cost_micros: int
    created_at: float
    content_action: str
    estimated: bool
    over_reservation_micros: int
    implausible: bool
    usage_detail: dict[str, Any] | None = None

    @property
    def provider(self) -> str | None:
        """The provider of the routing row that served it (`provider/upstream-model@host`)."""
        return self.row_key.split("/", 1)[0] if self.row_key else None

    @property
    def latency_ms(self) -> int | None:
        """Milliseconds from the request's admission (the time in its ledger id) to its row; None for a row
        whose id carries no time."""
        match = _LEDGER_ID.match(self.id)
        if match is None:
            return None
        return max(0, round(self.created_at * 1000) - int(match.group(1), 16))

    @property
    def refused(self) -> bool:
        """Refused by the gateway (402, 403 or 429) rather than served."""
        return self.status in REFUSED_STATUSES


def _record(row: Row, detail: bool = False) -> RequestRecord:
    usage_detail = None
    if detail and row.get("usage_detail"):
        parsed = orjson.loads(row["usage_detail"])
        usage_detail = parsed if isinstance(parsed, dict) else None
    return RequestRecord(
        row["id"],
        row["key_id"],
        row["system_id"],
        row["model"],
        row["row_key"],
        row["request_id"],
        int(row["status"]),
        row["outcome"],
        int(row["input_tokens"]),
        int(row["cached_input_tokens"]),
        int(row["output_tokens"]),
        float(row["units"]),
        int(row["cost_micros"]),
        float(row["created_at"]),
        row["content_action"] or "",
        bool(row["usage_estimated"]),
        int(row["over_reservation_micros"]),
        bool(row["usage_implausible"]),
        usage_detail,
    )


def _where(filters: RequestFilter, args: list[Any]) -> str:
    clauses = ""
    for column, value in (
        ("key_id", filters.key_id),
        ("system_id", filters.system_id),
        ("model", filters.model),
        ("status", filters.status),
        ("outcome", filters.outcome),
    ):
        if value is not None:
            args.append(value)
            clauses += f" AND {column} = ${len(args)}"
    if filters.start is not None:
        args.append(filters.start)
        clauses += f" AND created_at >= ${len(args)}"
    if filters.end is not None:
        args.append(filters.end)
        clauses += f" AND created_at < ${len(args)}"
    return clauses


async def newest_requests(
    ex: Executor,
    organization_id: str,
    count: int,
    after: tuple[float, str] | None = None,
    filters: RequestFilter | None = None,
) -> list[RequestRecord]:
    """Up to `count` of the organization's rows matching `filters`, newest first (by created_at, then id),
    those after the position `after` when it is given."""
    args: list[Any] = [organization_id]
    where = _where(filters or RequestFilter(), args)
    if after is not None:
        args += [after[0], after[1]]
        at, row_id = len(args) - 1, len(args)
        # Both forms bound the index scan: the first is the range, the second breaks the tie.
        where += f" AND created_at <= ${at} AND (created_at < ${at} OR id < ${row_id})"
    args.append(count)
    rows = await ex.fetch(
        f"SELECT {_COLUMNS} FROM usage_ledger WHERE organization_id = $1{where}"
        f" ORDER BY created_at DESC, id DESC LIMIT ${len(args)}",
        *args,
    )
    return [_record(row) for row in rows]


async def request_in_organization(ex: Executor, organization_id: str, row_id: str) -> RequestRecord | None:
    """One row of the organization, with its usage detail; another organization's row is None."""
    row = await ex.fetchrow(
        f"SELECT {_COLUMNS}, usage_detail FROM usage_ledger WHERE id = $1 AND organization_id = $2",
        row_id,
        organization_id,
    )
    return _record(row, detail=True) if row else None
