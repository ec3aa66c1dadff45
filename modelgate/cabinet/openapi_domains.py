"""The single sign-on domains part of the OpenAPI document: claims, their DNS proof and the operator's
approval (docs/cabinet.md, "Single sign-on domains"); `openapi_document` merges these paths and schemas."""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.oidc.domains import TXT_LABEL, TXT_PREFIX
from modelgate.cabinet.openapi import (
    _ADMIN,
    _AUTH_ERRORS,
    _NULLABLE_TIME,
    _STR,
    _TIME,
    _obj,
    _op,
    _path_param,
    _ref,
)
from modelgate.cabinet.openapi_billing import _operator_op


def _with_conflict(op: dict[str, Any], description: str) -> dict[str, Any]:
    op["responses"]["409"] = {
        "description": description,
        "content": {"application/json": {"schema": _ref("Error")}},
    }
    return op


_TAKEN = "The domain is verified by another organization (it must release it first)"

DOMAIN_PATHS: dict[str, dict[str, Any]] = {
    "/auth/oidc/domains": {
        "get": _op(
            "The organization's single sign-on domains, verified or pending",
            (200, "SsoDomainList"),
            roles=_ADMIN,
            errors=_AUTH_ERRORS,
        ),
        "post": _with_conflict(
            _op(
                "Claim an e-mail domain (never a public mail domain); the answer names its TXT record",
                (201, "SsoDomain"),
                body="SsoDomainRequest",
                roles=_ADMIN,
                errors=_AUTH_ERRORS,
            ),
            f"{_TAKEN}, or this organization claimed it already",
        ),
    },
    "/auth/oidc/domains/{domain}/verify": {
        "parameters": [_path_param("domain")],
        "post": _with_conflict(
            _op(
                f"Look up the claim's TXT record ({TXT_PREFIX}<token> at {TXT_LABEL}.<domain> or the domain):"
                " 400 when it is not published, 503 when no DNS server answered",
                (200, "SsoDomain"),
                roles=_ADMIN,
                errors=(*_AUTH_ERRORS, 404),
            ),
            _TAKEN,
        ),
    },
    "/auth/oidc/domains/{domain}": {
        "parameters": [_path_param("domain")],
        "delete": _op(
            "Release a claimed domain: the organization's providers are no longer offered or accepted for it",
            (200, "SsoDomain"),
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 404),
        ),
    },
    "/operator/organizations/{id}/sso-domains": {
        "parameters": [_path_param("id")],
        "post": _with_conflict(
            _operator_op(
                "Approve a single sign-on domain for an organization (verified at once, without DNS)",
                (200, "SsoDomain"),
                body="SsoDomainRequest",
            ),
            _TAKEN,
        ),
    },
    "/operator/sso-domains/{domain}": {
        "parameters": [_path_param("domain")],
        "delete": _operator_op(
            "Release a verified domain from the organization that holds it", (200, "SsoDomain")
        ),
    },
}
DOMAIN_PATHS["/auth/oidc/domains/{domain}/verify"]["post"]["responses"]["503"] = {
    "description": "No DNS server answered the lookup; try again",
    "content": {"application/json": {"schema": _ref("Error")}},
}

DOMAIN_SCHEMAS: dict[str, Any] = {
    "SsoDomainRequest": _obj(("domain",), domain={"type": "string", "description": "e.g. example.com"}),
    "SsoDomain": _obj(
        ("domain", "status", "txtName", "txtValue", "createdAt"),
        domain=_STR,
        status={"type": "string", "enum": ["pending", "verified"]},
        verifiedBy={"type": ["string", "null"], "enum": ["dns", "operator", None]},
        txtName={
            "type": "string",
            "description": "Where to publish the TXT record (or at the domain itself)",
        },
        txtValue={"type": "string", "description": "The TXT record's value"},
        organizationId={"type": "string", "description": "Operator answers only"},
        released={"type": "boolean", "description": "Release answers only"},
        createdAt=_TIME,
        verifiedAt=_NULLABLE_TIME,
    ),
    "SsoDomainList": _obj(("domains",), domains={"type": "array", "items": _ref("SsoDomain")}),
}
