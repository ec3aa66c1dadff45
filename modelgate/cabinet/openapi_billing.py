"""The billing part of the OpenAPI document: policy rules, invoices, usage and the operator API.

Kept beside `cabinet.openapi` (whose helpers it uses) so that file stays one idea; `openapi_document`
merges these paths, schemas and the operator security scheme.
"""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.billing import ADJUSTMENT_KINDS, MAX_REASON_LENGTH
from modelgate.cabinet.openapi import (
    _ADMIN,
    _AUTH_ERRORS,
    _NULLABLE_STR,
    _STR,
    _TIME,
    _obj,
    _op,
    _path_param,
    _query_param,
    _ref,
)
from modelgate.cabinet.policy_rule_input import (
    BUDGET_PERIODS,
    EFFECTS,
    MAX_BUDGET_MICROS,
    MAX_CONTENT_PATTERN_LENGTH,
    MAX_CONTENT_PATTERNS,
    MAX_PATTERNS,
    MAX_PHRASE_LENGTH,
    MAX_PHRASES,
    MAX_RATE,
    SUBJECT_TYPES,
)
from modelgate.cabinet.usage import GROUPINGS, MAX_DAYS
from modelgate.domain.content_matching import DETECTORS
from modelgate.domain.money import MAX_CREDIT_MICROS
from modelgate.domain.policy_rules import CONTENT_PLACES

_INT = {"type": "integer"}
_MICROS = {"type": "integer", "description": "Micro-units of the configured currency"}
_NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
_DATE = {"type": "string", "format": "date"}

OPERATOR_SECURITY_SCHEMES: dict[str, Any] = {
    "operator": {
        "type": "http",
        "scheme": "bearer",
        "description": "server.operator_token of the config; without one the operator API answers 404.",
    }
}


def _operator_op(summary: str, ok: tuple[int, str], *, body: str | None = None) -> dict[str, Any]:
    op = _op(summary, ok, body=body, errors=(400, 401, 404, 409) if body is None else (400, 401, 404))
    op["security"] = [{"operator": []}]
    op["responses"]["401"]["description"] = "Missing or wrong operator token"
    op["responses"]["404"]["description"] = "Unknown id, or the operator API is disabled (no operator token)"
    return op


_RULE_ERRORS = (*_AUTH_ERRORS, 404)

BILLING_PATHS: dict[str, dict[str, Any]] = {
    "/policy-rules": {
        "post": _op(
            "Create a policy rule",
            (201, "PolicyRule"),
            body="PolicyRuleRequest",
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 409),
        ),
        "get": _op("The organization's policy rules, oldest first", (200, "PolicyRuleList")),
    },
    "/policy-rules/{id}": {
        "parameters": [_path_param("id")],
        "get": _op("One policy rule", (200, "PolicyRule"), errors=(401, 404)),
        "patch": _op(
            "Change a policy rule (null clears budget, rpm or tpm)",
            (200, "PolicyRule"),
            body="PolicyRuleUpdateRequest",
            roles=_ADMIN,
            errors=_RULE_ERRORS,
        ),
        "delete": _op("Delete a policy rule", (200, "PolicyRule"), roles=_ADMIN, errors=_RULE_ERRORS),
    },
    "/invoices": {"get": _op("The organization's invoices, newest first", (200, "InvoiceList"))},
    "/alerts": {
        "get": _op("The organization's spend alerts", (200, "AlertList"), roles="owner", errors=(401, 403)),
        "post": _op(
            "Create a spend alert; the first one also answers the webhook signing secret, shown once",
            (201, "Alert"),
            body="AlertCreateRequest",
            roles="owner",
            errors=_AUTH_ERRORS,
        ),
    },
    "/alerts/deliveries": {
        "get": _op(
            "The latest 100 webhook deliveries of the organization's alerts, newest first",
            (200, "AlertDeliveryList"),
            roles="owner",
            errors=(401, 403),
        ),
    },
    "/alerts/signing-secret/rotate": {
        "post": _op(
            "A new webhook signing secret, answered once; the old one signs nothing more",
            (200, "AlertSigningSecret"),
            roles="owner",
            errors=(401, 403),
        ),
    },
    "/alerts/{id}": {
        "parameters": [_path_param("id")],
        "delete": _op(
            "Delete a spend alert (its deliveries stay logged)",
            (204, None),
            roles="owner",
            errors=(401, 403, 404),
        ),
    },
    "/usage": {
        "get": _op(
            "Usage of the model API from the ledger, by UTC day, model, key or system",
            (200, "UsageReport"),
            params=(
                _query_param("from", _DATE, "First UTC day (default: 29 days before `to`)"),
                _query_param(
                    "to", _DATE, f"Last UTC day, inclusive (default: today); at most {MAX_DAYS} days"
                ),
                _query_param("groupBy", {"type": "string", "enum": list(GROUPINGS)}, "Default: day"),
                _query_param(
                    "then",
                    {"type": "string", "enum": [g for g in GROUPINGS if g != "day"]},
                    "A second grouping, other than groupBy: each row gets `breakdown`, its usage split by it",
                ),
                _query_param("keyId", _STR, "Only this API key's requests"),
                _query_param("model", _STR, "Only requests for this model"),
            ),
        )
    },
    "/operator/invoices/{id}/mark-paid": {
        "parameters": [_path_param("id")],
        "post": _operator_op(
            "Mark an open invoice paid: credit its amount and activate the organization", (200, "Payment")
        ),
    },
    "/operator/organizations/{id}/top-up": {
        "parameters": [_path_param("id")],
        "post": _operator_op(
            "Top up an organization's balance with a paid top-up invoice",
            (201, "Payment"),
            body="TopUpRequest",
        ),
    },
    "/operator/organizations/{id}/invoices": {
        "parameters": [_path_param("id")],
        "get": _operator_op("An organization's balance and invoices", (200, "OrganizationInvoices")),
    },
    "/operator/organizations/{id}/adjust": {
        "parameters": [_path_param("id")],
        "post": _operator_op(
            "Credit, debit or set an organization's balance (refund, correction, chargeback); audited"
            " `balance.adjusted` with the reason",
            (201, "Adjustment"),
            body="AdjustmentRequest",
        ),
    },
    "/operator/organizations/{id}/plan": {
        "parameters": [_path_param("id")],
        "post": _operator_op(
            "Move an organization to any plan (a credit plan included); audited `plan.changed`, in effect at"
            " once in every running gateway",
            (200, "PlanChange"),
            body="PlanChangeRequest",
        ),
    },
    "/operator/registration-invitations": {
        "post": _operator_op(
            "Invite an e-mail to register an organization on a plan: the token is shown only here, expires"
            " after [cabinet] invitation_ttl_seconds and is used once",
            (201, "RegistrationInvitation"),
            body="RegistrationInvitationRequest",
        ),
    },
}
# An invitation for an e-mail that already has an account conflicts with it.
BILLING_PATHS["/operator/registration-invitations"]["post"]["responses"]["409"] = {
    "description": "An account with this e-mail already exists",
    "content": {"application/json": {"schema": _ref("Error")}},
}
# Reading an operator list cannot conflict with anything.
del BILLING_PATHS["/operator/organizations/{id}/invoices"]["get"]["responses"]["409"]

_BUDGET = _obj(
    ("amountMicros", "period"),
    amountMicros={
        **_MICROS,
        "minimum": 0,
        "maximum": MAX_BUDGET_MICROS,
        "description": "0 freezes spending: any request that costs is refused with 402",
    },
    period={"type": "string", "enum": list(BUDGET_PERIODS)},
)
_BUDGET["additionalProperties"] = False
_CONTENT = _obj(
    ("where",),
    where={"type": "string", "enum": list(CONTENT_PLACES)},
    phrases={
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_PHRASE_LENGTH},
        "maxItems": MAX_PHRASES,
        "description": "Literal phrases",
    },
    patterns={
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT_PATTERN_LENGTH},
        "maxItems": MAX_CONTENT_PATTERNS,
        "description": "RE2 expressions; no backreferences or lookaround (they must run in linear time)",
    },
    detectors={"type": "array", "items": {"type": "string", "enum": list(DETECTORS)}},
)
_CONTENT["additionalProperties"] = False
_CONTENT["description"] = "At least one phrase, pattern or detector"
_RULE_FIELDS: dict[str, Any] = {
    "subjectType": {"type": "string", "enum": list(SUBJECT_TYPES)},
    "subjectId": {
        "type": ["string", "null"],
        "description": "The caller's organization (default for `organization`), or a key or system of it",
    },
    "effect": {"type": "string", "enum": list(EFFECTS)},
    "models": {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "minItems": 1,
        "maxItems": MAX_PATTERNS,
        "description": "Model name globs, case-sensitive: `*`, `?`, `[seq]`; required of allow and deny"
        ' rules, a content rule defaults to `["*"]`',
    },
    "budget": {"oneOf": [_ref("PolicyRuleBudget"), {"type": "null"}], "description": "Allow rules only"},
    "rpm": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_RATE, "description": "0: unlimited"},
    "tpm": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_RATE, "description": "0: unlimited"},
    "description": _STR,
    "content": {
        "oneOf": [_ref("PolicyRuleContent"), {"type": "null"}],
        "description": "Block, redact and flag rules only (required of them); null on allow and deny rules",
    },
}


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "additionalProperties": False}


_INVOICE = _obj(
    ("id", "kind", "planCode", "amountMicros", "status", "createdAt", "paidAt"),
    id=_STR,
    kind={"type": "string", "enum": ["plan", "top_up"]},
    planCode=_STR,
    amountMicros=_MICROS,
    status={"type": "string", "enum": ["open", "paid", "void"]},
    createdAt=_TIME,
    paidAt=_NULLABLE_TIME,
    payment={
        **_obj(("link", "instructions"), link=_NULLABLE_STR, instructions=_NULLABLE_STR),
        "description": "On an open invoice that owes money (cabinet answers): how to pay it, from the"
        " operator's `[billing] payment_link` and `payment_instructions` (null when not configured)",
    },
)
_USAGE_NUMBERS = {
    "requests": {"type": "integer", "description": "Every ledger row: served and refused requests"},
    "served": {"type": "integer", "description": "requests - refused"},
    "refused": {"type": "integer", "description": "Refused by the gateway: 402, 403 or 429"},
    "errors": {"type": "integer", "description": "Served but failed: another 4xx or 5xx, or never answered"},
    "inputTokens": _INT,
    "cachedInputTokens": _INT,
    "outputTokens": _INT,
    "costMicros": _MICROS,
}

BILLING_SCHEMAS: dict[str, Any] = {
    "PolicyRuleBudget": _BUDGET,
    "PolicyRuleContent": _CONTENT,
    "PolicyRuleRequest": _closed(_obj(("subjectType", "effect"), **_RULE_FIELDS)),
    "PolicyRuleUpdateRequest": _closed(_obj((), **_RULE_FIELDS)),
    "PolicyRule": _obj(
        (
            "id",
            "organizationId",
            "subjectType",
            "subjectId",
            "effect",
            "models",
            "budget",
            "rpm",
            "tpm",
            "content",
        ),
        id=_STR,
        organizationId=_STR,
        **{**_RULE_FIELDS, "subjectId": _STR},
        createdAt=_TIME,
        updatedAt=_TIME,
    ),
    "PolicyRuleList": _obj(("policyRules",), policyRules={"type": "array", "items": _ref("PolicyRule")}),
    "Invoice": _INVOICE,
    "Alert": _obj(
        ("id", "kind", "url", "createdAt"),
        id=_STR,
        kind={"type": "string", "enum": ["budget", "daily"]},
        ruleId={**_NULLABLE_STR, "description": "budget: the policy rule whose budget is watched"},
        percent={"type": ["integer", "null"], "enum": [50, 80, 100, None]},
        subjectType={"type": ["string", "null"], "enum": ["organization", "system", "key", None]},
        subjectId=_NULLABLE_STR,
        amountMicros={"type": ["integer", "null"], "description": "daily: the amount a UTC day"},
        url={**_STR, "description": "The webhook, http:// or https://"},
        createdAt=_TIME,
        signingSecret={
            **_STR,
            "description": "Only in the answer that created the organization's first alert: the secret of"
            ' the `modelgate-signature` header (t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">)',
        },
    ),
    "AlertCreateRequest": _closed(
        _obj(
            ("kind", "url"),
            kind={"type": "string", "enum": ["budget", "daily"]},
            url=_STR,
            ruleId=_STR,
            percent={"type": "integer", "enum": [50, 80, 100]},
            subjectType={"type": "string", "enum": ["organization", "system", "key"]},
            subjectId=_STR,
            amountMicros={**_MICROS, "minimum": 1},
        )
    ),
    "AlertSigningSecret": _obj(
        ("signingSecret",),
        signingSecret={**_STR, "description": "The new `whsec_` secret of the `modelgate-signature` header"},
    ),
    "AlertList": _obj(
        ("alerts", "hasSigningSecret"),
        alerts={"type": "array", "items": _ref("Alert")},
        hasSigningSecret={"type": "boolean"},
    ),
    "AlertDelivery": _obj(
        ("id", "alertId", "url", "status", "attempts", "createdAt"),
        id=_STR,
        alertId=_STR,
        url=_STR,
        status={"type": "string", "enum": ["pending", "delivered", "failed"]},
        attempts={"type": "integer"},
        lastStatus={"type": ["integer", "null"]},
        lastError=_NULLABLE_STR,
        nextAttemptAt=_NULLABLE_TIME,
        createdAt=_TIME,
        deliveredAt=_NULLABLE_TIME,
    ),
    "AlertDeliveryList": _obj(("deliveries",), deliveries={"type": "array", "items": _ref("AlertDelivery")}),
    "InvoiceList": _obj(("invoices",), invoices={"type": "array", "items": _ref("Invoice")}),
    "UsageTotals": _obj(tuple(_USAGE_NUMBERS), **_USAGE_NUMBERS),
    "UsageReport": _obj(
        ("from", "to", "groupBy", "currency", "rows", "totals"),
        **{"from": _DATE},
        to=_DATE,
        groupBy={"type": "string", "enum": list(GROUPINGS)},
        currency=_STR,
        rows={
            "type": "array",
            "description": "Usage numbers plus the group: `day`, `model`, `keyId` or `systemId`",
            "items": _obj(
                tuple(_USAGE_NUMBERS),
                day=_DATE,
                model=_STR,
                keyId={"type": ["string", "null"]},
                systemId={"type": ["string", "null"]},
                breakdown={
                    "type": "array",
                    "description": "With `then`: the row's usage by that grouping, costliest first",
                    "items": _obj(
                        tuple(_USAGE_NUMBERS),
                        model=_STR,
                        keyId={"type": ["string", "null"]},
                        systemId={"type": ["string", "null"]},
                        **_USAGE_NUMBERS,
                    ),
                },
                **_USAGE_NUMBERS,
            ),
        },
        totals=_ref("UsageTotals"),
    ),
    "BillingOverview": _obj(
        ("currency", "plan", "balanceMicros", "activated", "creditLimitMicros", "canSpend", "usage"),
        currency=_STR,
        plan={
            "type": ["object", "null"],
            "properties": {
                "code": _STR,
                "name": _STR,
                "monthlyFeeMicros": _MICROS,
                "creditLimitMicros": _MICROS,
            },
        },
        balanceMicros=_MICROS,
        activated={"type": "boolean", "description": "A first invoice or top-up was paid"},
        activatedAt=_NULLABLE_TIME,
        creditLimitMicros=_MICROS,
        canSpend={"type": "boolean", "description": "Activated, or the plan has a credit limit"},
        usage=_obj(
            ("since", "requests", "served", "refused", "errors", "costMicros"),
            since=_TIME,
            requests=_INT,
            served=_INT,
            refused=_INT,
            errors=_INT,
            costMicros=_MICROS,
        ),
        openInvoices={"type": "array", "items": _ref("Invoice")},
    ),
    "TopUpRequest": _closed(_obj(("amountMicros",), amountMicros={**_MICROS, "minimum": 1})),
    "Payment": _obj(
        ("organizationId", "invoice", "creditedMicros", "balanceMicros", "currency"),
        organizationId=_STR,
        invoice=_ref("Invoice"),
        creditedMicros=_MICROS,
        balanceMicros=_MICROS,
        currency=_STR,
    ),
    "AdjustmentRequest": _closed(
        _obj(
            ("kind", "amountMicros", "reason"),
            kind={"type": "string", "enum": list(ADJUSTMENT_KINDS)},
            amountMicros={
                **_MICROS,
                "minimum": -MAX_CREDIT_MICROS,
                "maximum": MAX_CREDIT_MICROS,
                "description": "credit/debit: a positive amount; set: the balance to reach (0 or less too)",
            },
            reason={"type": "string", "minLength": 1, "maxLength": MAX_REASON_LENGTH},
        )
    ),
    "Adjustment": _obj(
        ("id", "organizationId", "kind", "amountMicros", "balanceMicros", "reason"),
        id={"type": "string", "description": "The balance event's id"},
        organizationId=_STR,
        kind={"type": "string", "enum": list(ADJUSTMENT_KINDS)},
        requestedMicros={**_MICROS, "description": "The amountMicros of the request"},
        amountMicros={**_MICROS, "description": "The signed change applied to the balance"},
        balanceMicros={**_MICROS, "description": "The stored balance after the change"},
        reason=_STR,
        currency=_STR,
        createdAt=_TIME,
    ),
    "PlanChangeRequest": _closed(_obj(("planCode",), planCode=_STR)),
    "PlanChange": _obj(
        ("organizationId", "planCode", "previousPlanCode"),
        organizationId=_STR,
        planCode=_STR,
        previousPlanCode=_STR,
    ),
    "RegistrationInvitationRequest": _closed(_obj(("email", "planCode"), email=_STR, planCode=_STR)),
    "RegistrationInvitation": _obj(
        ("id", "email", "planCode", "status", "createdAt", "expiresAt", "token"),
        id=_STR,
        email=_STR,
        planCode=_STR,
        status={"type": "string", "enum": ["pending", "used"]},
        createdAt=_TIME,
        expiresAt=_TIME,
        token={
            "type": "string",
            "description": "invitationToken of POST /api/auth/register; shown only here",
        },
    ),
    "OrganizationInvoices": _obj(
        ("organizationId", "legalName", "planCode", "balanceMicros", "activated", "invoices"),
        organizationId=_STR,
        legalName=_STR,
        planCode=_STR,
        balanceMicros=_MICROS,
        activated={"type": "boolean"},
        activatedAt=_NULLABLE_TIME,
        currency=_STR,
        invoices={"type": "array", "items": _ref("Invoice")},
    ),
}
