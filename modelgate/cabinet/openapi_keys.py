"""The models, key report and organization settings part of the OpenAPI document (issue #38: the model
catalogue and keys as the unit of control); `openapi_document` merges these paths and schemas."""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.key_report import MAX_LIMIT, SORTS
from modelgate.cabinet.openapi import (
    _ADMIN,
    _AUTH_ERRORS,
    _NULLABLE_STR,
    _NULLABLE_TIME,
    _STR,
    _TIME,
    _obj,
    _op,
    _query_param,
    _ref,
)

_INT = {"type": "integer"}
_NULLABLE_INT = {"type": ["integer", "null"]}
_PER_MTOK = {
    "type": "object",
    "additionalProperties": {"type": "number"},
    "description": "Currency units per million tokens of each token kind (input, cachedInput,"
    " cacheWrite5m, cacheWrite1h, inputAudio, inputImage, output, reasoning, outputAudio, outputImage)",
}
_BUDGET = {
    "type": ["object", "null"],
    "properties": {"amountMicros": _INT, "period": {"type": "string", "enum": ["day", "month"]}},
}
_RULE_LIMITS = _obj(
    ("ruleId", "subjectType", "effect", "models"),
    ruleId=_STR,
    subjectType=_STR,
    subjectId=_STR,
    effect=_STR,
    models={"type": "array", "items": _STR},
    budget=_BUDGET,
    rpm=_NULLABLE_INT,
    tpm=_NULLABLE_INT,
)

KEYS_PATHS: dict[str, dict[str, Any]] = {
    "/models": {
        "get": _op(
            "The models the organization may use: kinds, prices per token kind, context window, the plan's"
            " limits and the access rules that match each",
            (200, "ModelCatalogue"),
        ),
    },
    "/key-report": {
        "get": _op(
            "The organization's keys a page at a time, with creation, last use (from the ledger), spend today"
            " and this month, and the rules that apply",
            (200, "KeyReport"),
            params=(
                _query_param(
                    "q", {"type": "string", "maxLength": 200}, "Text in the alias, owner, id or status"
                ),
                _query_param(
                    "sort",
                    {"type": "string", "enum": [*SORTS, *(f"-{s}" for s in SORTS)]},
                    "Sort key; a leading - sorts descending (default -created)",
                ),
                _query_param(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                    "Keys per page (default 50)",
                ),
                _query_param("offset", {"type": "integer", "minimum": 0}, "Keys to skip"),
            ),
        ),
    },
    "/organization/settings": {
        "get": _op("The organization's settings", (200, "OrganizationSettings")),
        "patch": _op(
            "Change the organization's settings",
            (200, "OrganizationSettings"),
            body="OrganizationSettings",
            roles=_ADMIN,
            errors=_AUTH_ERRORS,
        ),
    },
}

KEYS_SCHEMAS: dict[str, Any] = {
    "ModelCatalogue": _obj(
        ("models", "plan", "currency"),
        models={"type": "array", "items": _ref("CatalogueModel")},
        plan=_ref("PlanLimits"),
        currency=_STR,
    ),
    "CatalogueModel": _obj(
        ("id", "kinds", "contextWindow", "prices", "rules"),
        id=_STR,
        kinds={"type": "array", "items": _STR},
        contextWindow=_INT,
        defaultMaxTokens=_INT,
        prices={"type": "object", "properties": {"perMillionTokens": _PER_MTOK, "source": _STR}},
        rules={"type": "array", "items": _RULE_LIMITS},
    ),
    "PlanLimits": {
        "type": ["object", "null"],
        "properties": {
            "code": _STR,
            "name": _STR,
            "rpm": _INT,
            "tpm": _INT,
            "realtimeConcurrency": _INT,
            "creditLimitMicros": _INT,
        },
    },
    "KeyReport": _obj(
        ("keys", "total", "limit", "offset", "sort"),
        keys={"type": "array", "items": _ref("KeyReportRow")},
        total=_INT,
        limit=_INT,
        offset=_INT,
        sort=_STR,
        plan=_ref("PlanLimits"),
    ),
    "KeyReportRow": _obj(
        ("id", "alias", "status", "createdAt", "lastUsedAt", "spendTodayMicros", "spendMonthMicros", "rules"),
        id=_STR,
        alias=_STR,
        ownerEmail=_STR,
        systemId=_NULLABLE_STR,
        status=_STR,
        createdAt=_TIME,
        revokedAt=_NULLABLE_TIME,
        lastUsedAt=_NULLABLE_TIME,
        spendTodayMicros=_INT,
        spendMonthMicros=_INT,
        rules={"type": "array", "items": {"type": "object"}},
    ),
    "OrganizationSettings": _obj(
        (),
        membersCreateKeys={
            "type": "boolean",
            "description": "Members may create their own API keys (default false)",
        },
    ),
}
