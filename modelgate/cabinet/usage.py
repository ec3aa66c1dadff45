"""Usage of the model API as the cabinet reports it, read from the usage ledger of the organization.

GET /usage sums the ledger by UTC day, model, key or system over a range of whole UTC days, of one key or
model when asked, and with `then` splits each row by a second grouping (spend by day and model for a chart,
in two queries); each sum says how many requests were refused (402/403/429) and how many failed; read through
`modelgate/cabinet/usage_repository.py`.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

from aiohttp import web

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.query_days import query_day
from modelgate.cabinet.requests import bad_request, json_response
from modelgate.cabinet.services import services_of
from modelgate.cabinet.usage_repository import UsageFilter, UsageTotals, usage_breakdown, usage_by

GROUPINGS = ("day", "model", "key", "system")
QUERY_PARAMETERS = ("from", "to", "groupBy", "then", "keyId", "model")
MAX_MODEL_LENGTH = 200
DEFAULT_DAYS = 30
MAX_DAYS = 366
_ID = re.compile(r"^[a-z]{1,16}_[0-9a-f]{8,64}$")
# The name of each grouping's column in the API's rows.
_GROUP_NAMES = {"model": "model", "key": "keyId", "system": "systemId"}


def report_then(request: web.Request, group_by: str) -> str | None:
    """The optional second grouping (`then`): model, key or system, other than groupBy."""
    then = request.query.get("then") or None
    if then is not None and (then not in _GROUP_NAMES or then == group_by):
        choices = ", ".join(name for name in _GROUP_NAMES if name != group_by)
        raise bad_request(f"then must be one of: {choices}")
    return then


def report_range(request: web.Request, today: date) -> tuple[date, date, str]:
    """The validated (from, to, groupBy) of a usage query; by default the last 30 days by day."""
    for name in request.query:
        if name not in QUERY_PARAMETERS:
            raise bad_request(f"unknown query parameter: {name}; use {', '.join(QUERY_PARAMETERS)}")
        if len(request.query.getall(name)) > 1:
            raise bad_request(f"{name} may be given only once")
    group_by = request.query.get("groupBy") or "day"
    if group_by not in GROUPINGS:
        raise bad_request(f"groupBy must be one of: {', '.join(GROUPINGS)}")
    last = query_day(request.query, "to") or today
    first = query_day(request.query, "from") or last - timedelta(days=DEFAULT_DAYS - 1)
    if first > last:
        raise bad_request("from must not be after to")
    if (last - first).days + 1 > MAX_DAYS:
        raise bad_request(f"the range from..to may span at most {MAX_DAYS} days")
    return first, last, group_by


def report_filter(request: web.Request) -> UsageFilter:
    """The optional `keyId` and `model` a report is limited to."""
    key_id = request.query.get("keyId") or None
    if key_id is not None and not _ID.match(key_id):
        raise bad_request("keyId is not an id")
    model = request.query.get("model") or None
    if model is not None and (len(model) > MAX_MODEL_LENGTH or not model.isprintable()):
        raise bad_request(f"model must be at most {MAX_MODEL_LENGTH} printable characters")
    return UsageFilter(key_id, model)


async def usage_report(request: web.Request) -> web.Response:
    """GET /usage?from=&to=&groupBy=&then=&keyId=&model= → usage rows of the caller's organization and their
    totals (any role), of one key and/or one model when those are given."""
    services = services_of(request)
    principal = await authenticate(request)
    first, last, group_by = report_range(request, datetime.now(UTC).date())
    then = report_then(request, group_by)
    only = report_filter(request)
    groups = await usage_by(services.db, principal.organization_id, first, last, group_by, only)
    name = "day" if group_by == "day" else _GROUP_NAMES[group_by]
    rows: list[dict[str, Any]] = [{name: group, **totals.to_json()} for group, totals in groups]
    if then is not None:  # each row split by the second grouping, read in one more query
        parts = await usage_breakdown(
            services.db, principal.organization_id, first, last, group_by, then, only
        )
        part_name = _GROUP_NAMES[then]
        for row, (group, _) in zip(rows, groups, strict=True):
            row["breakdown"] = [
                {part_name: part, **totals.to_json()} for part, totals in parts.get(group, ())
            ]
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
