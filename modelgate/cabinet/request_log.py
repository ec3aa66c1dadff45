"""The request log: the organization's usage ledger row by row (GET /requests), one row (GET /requests/{id})
and the same rows as CSV (GET /requests.csv), read through `modelgate/cabinet/request_log_repository.py`.

Pages are newest first and continue from an opaque cursor (a position, so a page never repeats or skips a row
while new requests arrive); any role may read them, always of its own organization only.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from aiohttp import web
from multidict import MultiMapping

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.query_days import DAY, FIRST_DAY, LAST_DAY, ROW_ID, decode_cursor, encode_cursor
from modelgate.cabinet.request_log_repository import (
    RequestFilter,
    RequestRecord,
    newest_requests,
    request_in_organization,
)
from modelgate.cabinet.requests import CabinetError, bad_request, json_response, path_id
from modelgate.cabinet.services import services_of
from modelgate.cabinet.systems_repository import systems_of
from modelgate.cabinet.usage_repository import day_start
from modelgate.domain.api_keys import api_keys_of

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
EXPORT_PAGE_SIZE = 1000  # rows per query while a CSV export streams
MAX_TEXT_LENGTH = 200
EXPORT_PARAMETERS = ("from", "to", "keyId", "systemId", "model", "status", "outcome")
QUERY_PARAMETERS = (*EXPORT_PARAMETERS, "limit", "cursor")
# How a request ended, as the ledger says (see modelgate/plugins/usage_metering.py); the filter accepts any
# such word, these are the ones the gateway writes today.
OUTCOMES = ("completed", "refused", "blocked", "client_closed", "upstream_error", "shutdown", "crashed")
_OUTCOME = re.compile(r"^[a-z_]{1,32}$")
_TIMESTAMP = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
CSV_COLUMNS = (
    "time", "id", "request_id", "key_id", "key_alias", "system_id", "system_name", "model", "provider", "row",
    "status", "outcome", "input_tokens", "cached_input_tokens", "output_tokens", "cost", "latency_ms",
    "content_action", "estimated",
)  # fmt: skip
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def time_text(epoch: float) -> str:
    """A ledger time as ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def request_json(record: RequestRecord) -> dict[str, Any]:
    """The request object of the API (the detail adds `usageDetail`, `units` and the overrun fields)."""
    return {
        "id": record.id,
        "createdAt": time_text(record.created_at),
        "requestId": record.request_id,
        "keyId": record.key_id,
        "systemId": record.system_id,
        "model": record.model,
        "provider": record.provider,
        "row": record.row_key,
        "status": record.status,
        "outcome": record.outcome,
        "refused": record.refused,
        "inputTokens": record.input_tokens,
        "cachedInputTokens": record.cached_input_tokens,
        "outputTokens": record.output_tokens,
        "costMicros": record.cost_micros,
        "latencyMs": record.latency_ms,
        "contentAction": record.content_action or None,
        "estimated": record.estimated,
    }


def _detail_json(record: RequestRecord) -> dict[str, Any]:
    return {
        **request_json(record),
        "units": record.units,
        "overReservationMicros": record.over_reservation_micros,
        "usageImplausible": record.implausible,
        "usageDetail": record.usage_detail,
    }


def _after(cursor: str) -> tuple[float, str]:
    """The position a request-log cursor points after (never an infinite time)."""
    position, row_id = decode_cursor(cursor)
    if position in (float("inf"), float("-inf")):
        raise bad_request("cursor is not valid")
    return position, row_id


def _moment(name: str, raw: str, end: bool) -> float:
    """`from`/`to` as epoch seconds: a UTC day (`to` then includes the whole day) or an ISO 8601 time with
    its offset (`to` then excludes that moment)."""
    try:
        if DAY.match(raw):
            day = date.fromisoformat(raw)
            if not FIRST_DAY <= day <= LAST_DAY:
                raise ValueError(raw)
            return day_start(day + timedelta(days=1)) if end else day_start(day)
        if _TIMESTAMP.match(raw):
            moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if not FIRST_DAY.year <= moment.astimezone(UTC).year <= LAST_DAY.year:
                raise ValueError(raw)
            return moment.timestamp()
    except (ValueError, OverflowError) as exc:
        raise _bad_moment(name) from exc
    raise _bad_moment(name)


def _bad_moment(name: str) -> CabinetError:
    return bad_request(f"{name} must be a date YYYY-MM-DD or a time like 2025-03-01T12:00:00Z, from 1970 on")


def _text(query: Mapping[str, str], name: str) -> str | None:
    value = query.get(name)
    if not value:
        return None
    if len(value) > MAX_TEXT_LENGTH or not value.isprintable():
        raise bad_request(f"{name} must be at most {MAX_TEXT_LENGTH} printable characters")
    return value


def _id(query: Mapping[str, str], name: str) -> str | None:
    value = query.get(name)
    if not value:
        return None
    if not ROW_ID.match(value):
        raise bad_request(f"{name} is not an id")
    return value


def request_filter(query: MultiMapping[str], parameters: tuple[str, ...] = QUERY_PARAMETERS) -> RequestFilter:
    """The filters of a request-log query (an empty value filters nothing); 400 for a bad value or a
    parameter not in `parameters`."""
    for name in query:
        if name not in parameters:
            raise bad_request(f"unknown query parameter: {name}; use {', '.join(parameters)}")
        if len(query.getall(name)) > 1:
            raise bad_request(f"{name} may be given only once")
    start = _moment("from", query["from"], end=False) if query.get("from") else None
    end = _moment("to", query["to"], end=True) if query.get("to") else None
    if start is not None and end is not None and start >= end:
        raise bad_request("from must be before to")
    status = None
    if raw := query.get("status"):
        if not (raw.isascii() and raw.isdigit() and len(raw) == 3) or not 100 <= int(raw) <= 599:
            raise bad_request("status must be an HTTP status from 100 to 599")
        status = int(raw)
    outcome = query.get("outcome") or None
    if outcome is not None and not _OUTCOME.match(outcome):
        raise bad_request(f"outcome must be a word such as {', '.join(OUTCOMES)}")
    return RequestFilter(
        start, end, _id(query, "keyId"), _id(query, "systemId"), _text(query, "model"), status, outcome
    )


def _page_size(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_PAGE_SIZE
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise bad_request(f"limit must be an integer from 1 to {MAX_PAGE_SIZE}")
    return int(raw)


async def list_requests(request: web.Request) -> web.Response:
    """GET /requests?from=&to=&keyId=&systemId=&model=&status=&outcome=&limit=&cursor=: the organization's
    ledger rows, newest first, those matching every filter given (any role)."""
    principal = await authenticate(request)
    filters = request_filter(request.query)
    limit = _page_size(request.query.get("limit"))
    cursor = request.query.get("cursor")
    after = _after(cursor) if cursor else None
    services = services_of(request)
    # One row more than the page tells whether a next page exists.
    found = await newest_requests(services.db, principal.organization_id, limit + 1, after, filters)
    rows = found[:limit]
    return json_response(
        {
            "currency": services.config.billing.currency,
            "requests": [request_json(r) for r in rows],
            "nextCursor": encode_cursor(rows[-1].created_at, rows[-1].id) if len(found) > limit else None,
        }
    )


async def get_request(request: web.Request) -> web.Response:
    """GET /requests/{id}: one ledger row of the organization, with what its charge was computed from."""
    principal = await authenticate(request)
    unknown = CabinetError(404, "request not found")
    row_id = path_id(request, "id", unknown=unknown)
    services = services_of(request)
    record = await request_in_organization(services.db, principal.organization_id, row_id)
    if record is None:
        raise unknown
    return json_response({"currency": services.config.billing.currency, **_detail_json(record)})


def csv_cell(value: object) -> str:
    """One CSV field: text a spreadsheet would run as a formula gets a leading apostrophe; quoted as
    needed."""
    text = "" if value is None else str(value)
    if text.startswith(_FORMULA_START):
        text = "'" + text
    if any(c in text for c in ',"\r\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def _csv_line(values: tuple[object, ...]) -> bytes:
    return (",".join(csv_cell(v) for v in values) + "\r\n").encode()


def _money(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{fraction:06d}"


async def export_requests(request: web.Request) -> web.StreamResponse:
    """GET /requests.csv with the filters of GET /requests: every matching row, newest first, as CSV."""
    principal = await authenticate(request)
    filters = request_filter(request.query, EXPORT_PARAMETERS)
    services = services_of(request)
    db, org = services.db, principal.organization_id
    aliases = {key.id: key.alias for key in await api_keys_of(db, org)}
    names = {system.id: system.name for system in await systems_of(db, org)}
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/csv; charset=utf-8",
            "Content-Disposition": 'attachment; filename="requests.csv"',
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        }
    )
    await response.prepare(request)
    currency = services.config.billing.currency.lower()
    await response.write(_csv_line(tuple(f"cost_{currency}" if c == "cost" else c for c in CSV_COLUMNS)))
    async for record in _all_rows(request, org, filters):
        await response.write(
            _csv_line(
                (
                    time_text(record.created_at),
                    record.id,
                    record.request_id,
                    record.key_id,
                    aliases.get(record.key_id or ""),
                    record.system_id,
                    names.get(record.system_id or ""),
                    record.model,
                    record.provider,
                    record.row_key,
                    record.status,
                    record.outcome,
                    record.input_tokens,
                    record.cached_input_tokens,
                    record.output_tokens,
                    _money(record.cost_micros),
                    record.latency_ms,
                    record.content_action,
                    "true" if record.estimated else "false",
                )
            )
        )
    await response.write_eof()
    return response


async def _all_rows(
    request: web.Request, organization_id: str, filters: RequestFilter
) -> AsyncIterator[RequestRecord]:
    """Every matching row, newest first, read a page at a time (memory stays bounded)."""
    db = services_of(request).db
    after: tuple[float, str] | None = None
    while True:
        page = await newest_requests(db, organization_id, EXPORT_PAGE_SIZE, after, filters)
        for record in page:
            yield record
        if len(page) < EXPORT_PAGE_SIZE:
            return
        after = (page[-1].created_at, page[-1].id)
