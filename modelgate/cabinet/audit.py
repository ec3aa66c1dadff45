"""The audit log: who did what to which object, newest first, read in stable pages, optionally filtered
(stored by `modelgate/domain/audit_log.py`), with the names of the objects it references, or as CSV."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from aiohttp import web

from modelgate.cabinet.audit_csv import CSV_PAGE_SIZE, MAX_CSV_ENTRIES, csv_header, csv_rows
from modelgate.cabinet.audit_names import names_of, referenced_ids
from modelgate.cabinet.auth import Principal, authenticate
from modelgate.cabinet.clock import isoformat
from modelgate.cabinet.query_days import decode_cursor, encode_cursor, query_day
from modelgate.cabinet.requests import bad_request, json_response
from modelgate.cabinet.services import services_of
from modelgate.cabinet.users import ADMIN_ROLES
from modelgate.domain.audit_log import Actor, AuditEntry, AuditFilter, newest_entries
from modelgate.proxy.pipeline.route_table import ROUTES

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
# Query parameter -> AuditFilter field. Values are event names, ids and route names: short and printable.
FILTER_PARAMETERS = {
    "event": "event",
    "ruleId": "target_id",
    "keyId": "key_id",
    "systemId": "system_id",
    "actor": "actor",
}
TEXT_PARAMETERS = (*FILTER_PARAMETERS, "route")
MAX_FILTER_LENGTH = 200
# A route as a client writes it (`/v1/chat/completions`, `POST /v1/responses/resp_1`) -> the route names that
# entries store; a path with an object id matches each method's route (`responses_get`, `responses_delete`).
_METHODS = frozenset(r.method for r in ROUTES)
_ROUTE_PATTERNS = tuple(
    (re.compile("^" + re.escape(r.path).replace(re.escape("{id}"), "[^/]+") + "$"), r.method, r.name)
    for r in ROUTES
)


def actor_of(principal: Principal) -> Actor:
    """The actor recorded for an authenticated caller."""
    if principal.kind == "management_key":
        return Actor("management_key", principal.key_id, None)
    return Actor("user", principal.user_id, principal.email)


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """The audit entry object of the API."""
    actor = entry.actor
    return {
        "id": entry.id,
        "event": entry.event,
        "actor": {"type": actor.type, "id": actor.id, "email": actor.email},
        "targetId": entry.target_id,
        "keyId": entry.key_id,
        "systemId": entry.system_id,
        "route": entry.route,
        "details": entry.details,
        "createdAt": isoformat(entry.created_at),
    }


def _named_entry_json(entry: AuditEntry, names: Mapping[str, str]) -> dict[str, Any]:
    """The entry object with the names of what it references: `names` holds id → name for every id of the
    entry whose object (still) exists in the organization."""
    return {
        **entry_json(entry),
        "names": {i: names[i] for i in dict.fromkeys(referenced_ids([entry])) if i in names},
    }


def _page_size(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_PAGE_SIZE
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise bad_request(f"limit must be an integer from 1 to {MAX_PAGE_SIZE}")
    return int(raw)


def route_names(given: str) -> tuple[str, ...]:
    """The stored route names a route filter means: a route name as it is, or a model API path (with or
    without `/v1`, a method, a host, a query or a trailing slash) as the names of the routes it reaches."""
    text = given.strip()
    method, _, rest = text.partition(" ")
    method = method.upper()
    if rest and method in _METHODS:
        text = rest.strip()
    else:
        method = ""
    if "/" not in text:
        return (text,)
    if "://" in text:  # a whole URL: its path
        text = "/" + text.split("://", 1)[1].partition("/")[2]
    path = text.split("?", 1)[0].rstrip("/")
    if not path.startswith("/"):
        path = "/" + path
    if not path.startswith("/v1/"):
        path = "/v1" + path
    names = tuple(
        name for pattern, verb, name in _ROUTE_PATTERNS if pattern.match(path) and method in ("", verb)
    )
    # A path that is no route of the model API finds what was recorded under it, which is nothing.
    return names or (given,)


def _start_of(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def _filters(query: Mapping[str, str]) -> AuditFilter:
    """The filters of the query; an empty value filters nothing, like an empty limit or cursor. `from` and
    `to` are UTC days, both included."""
    for parameter in TEXT_PARAMETERS:
        value = query.get(parameter)
        if value and (len(value) > MAX_FILTER_LENGTH or not value.isprintable()):
            raise bad_request(f"{parameter} must be at most {MAX_FILTER_LENGTH} printable characters")
    given: dict[str, Any] = {
        field: query[parameter] for parameter, field in FILTER_PARAMETERS.items() if query.get(parameter)
    }
    route = query.get("route")
    if route and route.strip():
        given["routes"] = route_names(route)
    first, last = query_day(query, "from"), query_day(query, "to")
    if first is not None and last is not None and first > last:
        raise bad_request("from must not be after to")
    if first is not None:
        given["since"] = _start_of(first)
    if last is not None:
        given["until"] = _start_of(last + timedelta(days=1))
    return AuditFilter(**given)


def _format(query: Mapping[str, str]) -> str:
    chosen = query.get("format") or "json"
    if chosen not in ("json", "csv"):
        raise bad_request("format must be json or csv")
    return chosen


async def audit_log_handler(request: web.Request) -> web.StreamResponse:
    """GET /audit-log?limit=&cursor=&event=&ruleId=&keyId=&systemId=&route=&actor=&from=&to=&format=: the
    organization's audit entries, newest first, those matching every filter given (owner/admin); with
    `format=csv` every matching entry (up to `MAX_CSV_ENTRIES`) as a CSV file."""
    principal = await authenticate(request, roles=ADMIN_ROLES)
    limit = _page_size(request.query.get("limit"))
    filters = _filters(request.query)
    if _format(request.query) == "csv":
        return await _csv_export(request, principal.organization_id, filters)
    cursor = request.query.get("cursor")
    after = decode_cursor(cursor) if cursor else None
    # One entry more than the page tells whether a next page exists; the cursor is a position, so it pages
    # on with the same filters.
    db = services_of(request).db
    found = await newest_entries(db, principal.organization_id, limit + 1, after, filters)
    entries = found[:limit]
    next_cursor = encode_cursor(entries[-1].created_at, entries[-1].id) if len(found) > limit else None
    names = await names_of(db, principal.organization_id, referenced_ids(entries))
    return json_response(
        {"entries": [_named_entry_json(e, names) for e in entries], "nextCursor": next_cursor}
    )


async def _csv_export(request: web.Request, organization_id: str, filters: AuditFilter) -> web.StreamResponse:
    """Every matching entry, newest first, written page by page so a long log is never held whole."""
    db = services_of(request).db
    answer = web.StreamResponse(
        headers={
            "Content-Type": "text/csv; charset=utf-8",
            "Content-Disposition": 'attachment; filename="audit-log.csv"',
            "Cache-Control": "no-store",
        }
    )
    await answer.prepare(request)
    await answer.write(csv_header())
    after: tuple[float, str] | None = None
    written = 0
    while written < MAX_CSV_ENTRIES:
        page = await newest_entries(
            db, organization_id, min(CSV_PAGE_SIZE, MAX_CSV_ENTRIES - written), after, filters
        )
        if not page:
            break
        names = await names_of(db, organization_id, referenced_ids(page))
        await answer.write(csv_rows(page, names))
        written += len(page)
        after = (page[-1].created_at, page[-1].id)
    await answer.write_eof()
    return answer
