"""The request-log part of the OpenAPI document: GET /requests, /requests.csv and /requests/{id}.

Kept beside `cabinet.openapi` (whose helpers it uses); `openapi_document` merges these paths and schemas.
"""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.openapi import _STR, _obj, _op, _path_param, _query_param, _ref
from modelgate.cabinet.request_log import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_TEXT_LENGTH, OUTCOMES

_INT = {"type": "integer"}
_NULLABLE_STR = {"type": ["string", "null"]}
_MOMENT = {
    "type": "string",
    "description": "A UTC day YYYY-MM-DD, or a time with its offset such as 2025-03-01T12:00:00Z",
}
_FILTERS = (
    _query_param("from", _MOMENT, "Rows at or after this day or time"),
    _query_param("to", _MOMENT, "Rows before this time, or up to the end of this UTC day"),
    _query_param("keyId", _STR, "Only this API key's requests"),
    _query_param("systemId", _STR, "Only requests of this system's keys"),
    _query_param("model", {"type": "string", "maxLength": MAX_TEXT_LENGTH}, "Only requests for this model"),
    _query_param("status", {"type": "integer", "minimum": 100, "maximum": 599}, "Only this HTTP status"),
    _query_param(
        "outcome", {"type": "string", "pattern": "^[a-z_]{1,32}$"}, f"How it ended: {', '.join(OUTCOMES)}"
    ),
)

REQUEST_PATHS: dict[str, dict[str, Any]] = {
    "/requests": {
        "get": _op(
            "The organization's requests of the model API (its usage ledger), newest first",
            (200, "RequestPage"),
            params=(
                *_FILTERS,
                _query_param(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
                    f"Page size (default {DEFAULT_PAGE_SIZE})",
                ),
                _query_param("cursor", _STR, "nextCursor of the previous page (with the same filters)"),
            ),
        )
    },
    "/requests.csv": {
        "get": _op(
            "Every request matching the filters as CSV (text/csv), newest first; text cells that a"
            " spreadsheet would run as a formula start with an apostrophe",
            (200, None),
            params=_FILTERS,
        )
    },
    "/requests/{id}": {
        "parameters": [_path_param("id")],
        "get": _op(
            "One request, with what its charge was computed from", (200, "RequestDetail"), errors=(401, 404)
        ),
    },
}
REQUEST_PATHS["/requests.csv"]["get"]["responses"]["200"]["content"] = {"text/csv": {"schema": _STR}}

_REQUEST_FIELDS: dict[str, Any] = {
    "id": _STR,
    "createdAt": {"type": "string", "format": "date-time"},
    "requestId": _STR,
    "keyId": _NULLABLE_STR,
    "systemId": _NULLABLE_STR,
    "model": _STR,
    "provider": {**_NULLABLE_STR, "description": "The provider of the routing row that served it"},
    "row": {**_NULLABLE_STR, "description": "That routing row: provider/upstream-model@host"},
    "status": {"type": "integer", "description": "The HTTP status answered (0: never answered)"},
    "outcome": _STR,
    "refused": {"type": "boolean", "description": "Refused by the gateway: 402, 403 or 429"},
    "inputTokens": _INT,
    "cachedInputTokens": _INT,
    "outputTokens": _INT,
    "costMicros": {"type": "integer", "description": "Micro-units of the currency"},
    "latencyMs": {
        "type": ["integer", "null"],
        "description": "From the request's admission to its ledger row (about 0 when refused before it)",
    },
    "contentAction": {
        **_NULLABLE_STR,
        "description": "What content policy did: blocked, redacted or flagged",
    },
    "estimated": {"type": "boolean", "description": "The provider reported no usage: tokens were estimated"},
}

REQUEST_SCHEMAS: dict[str, Any] = {
    "Request": _obj(tuple(_REQUEST_FIELDS), **_REQUEST_FIELDS),
    "RequestPage": _obj(
        ("currency", "requests", "nextCursor"),
        currency=_STR,
        requests={"type": "array", "items": _ref("Request")},
        nextCursor={**_NULLABLE_STR, "description": "The next page's cursor; null on the last page"},
    ),
    "RequestDetail": _obj(
        (*_REQUEST_FIELDS, "currency", "units", "overReservationMicros", "usageImplausible", "usageDetail"),
        **_REQUEST_FIELDS,
        currency=_STR,
        units={"type": "number", "description": "Images, audio and video seconds"},
        overReservationMicros={"type": "integer", "description": "Charged beyond the reservation"},
        usageImplausible={"type": "boolean"},
        usageDetail={
            "type": ["object", "null"],
            "description": "Usage kinds beyond input, cached and output tokens the charge was computed from",
        },
    ),
}
