"""The meters part of the OpenAPI document: `GET /meters` (budgets with what requests in flight hold, the
plan's limits and this minute's use). Merged by `openapi_document`."""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.openapi import _NULLABLE_STR, _STR, _obj, _op, _ref

_INT = {"type": "integer"}
_MICROS = {"type": "integer", "description": "Micro-units of the configured currency"}
_TIME = {"type": "string", "format": "date-time"}

METER_PATHS: dict[str, dict[str, Any]] = {
    "/meters": {
        "get": _op(
            "Budgets (spent, held by requests in flight, refusing), the plan's limits and this minute's use",
            (200, "Meters"),
            errors=(401,),
        )
    },
}

METER_SCHEMAS: dict[str, Any] = {
    "BudgetMeter": _obj(
        (
            "ruleId",
            "subjectType",
            "subjectId",
            "models",
            "period",
            "periodStart",
            "limitMicros",
            "spentMicros",
            "heldMicros",
            "availableMicros",
            "refusing",
            "lastReservation",
        ),
        ruleId=_STR,
        subjectType={"type": "string", "enum": ["organization", "system", "key"]},
        subjectId=_NULLABLE_STR,
        models={"type": "array", "items": _STR},
        description=_STR,
        period={"type": "string", "enum": ["day", "month"]},
        periodStart=_TIME,
        limitMicros=_MICROS,
        spentMicros={**_MICROS, "description": "Charged in this period (micro-units)"},
        heldMicros={**_MICROS, "description": "Reserved by requests in flight (their worst case)"},
        availableMicros={**_MICROS, "description": "limitMicros - spentMicros - heldMicros"},
        refusing={
            "type": "boolean",
            "description": "The next request could not fit: nothing is available, or less than the last"
            " reservation asked of this budget",
        },
        lastReservation={
            "oneOf": [
                _obj(
                    ("askedMicros", "at", "refused"),
                    askedMicros=_MICROS,
                    at=_TIME,
                    refused={"type": "boolean"},
                ),
                {"type": "null"},
            ],
            "description": "The last reservation this gateway process was asked of the budget",
        },
    ),
    "Meters": _obj(
        ("currency", "plan", "currentMinute", "budgets"),
        currency=_STR,
        plan=_obj(
            ("code", "name", "rpm", "tpm", "creditLimitMicros"),
            code=_STR,
            name=_STR,
            rpm={**_INT, "description": "Requests per minute per key and per organization (0: none)"},
            tpm={**_INT, "description": "Tokens per minute per key and per organization (0: none)"},
            creditLimitMicros=_MICROS,
        ),
        currentMinute=_obj(
            ("requests", "tokens"),
            requests={
                **_INT,
                "description": "Requests of the organization in the last 60 seconds (0 when the plan sets"
                " no RPM: no window is kept)",
            },
            tokens={
                **_INT,
                "description": "Tokens of the organization in the last 60 seconds (0 when the plan sets no"
                " TPM)",
            },
        ),
        budgets={"type": "array", "items": _ref("BudgetMeter")},
    ),
}
