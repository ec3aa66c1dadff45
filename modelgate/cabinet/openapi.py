"""The OpenAPI 3.1 document of the cabinet API, served at GET /api/openapi.json.

Hand-written on purpose: it is the contract. A test checks it against the app's route table.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from modelgate.cabinet.audit import MAX_FILTER_LENGTH
from modelgate.cabinet.requests import json_response
from modelgate.cabinet.services import services_of

PREFIX = "/api"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


_STR = {"type": "string"}
_NULLABLE_STR = {"type": ["string", "null"]}
_AUDIT_FILTER = {"type": "string", "maxLength": MAX_FILTER_LENGTH}
_TIME = {"type": "string", "format": "date-time"}
_NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
_ROLE = {"type": "string", "enum": ["owner", "admin", "member"]}
_STATUS = {"type": "string", "enum": ["active", "revoked"]}
# The web cabinet's session (modelgate/cabinet/web_security.py): only for a browser page of this gateway.
_CSRF_TOKEN = {
    "type": "string",
    "description": "Only when the session cookie mg_session is set or used: send it as X-CSRF-Token on"
    " POST, PATCH, PUT and DELETE requests the cookie authenticates",
}

_DELIVERY = {
    "type": "string",
    "enum": ["email", "operator"],
    "description": "email: sent by SMTP ([email]); operator: no [email], the operator passes the link on"
    " (modelgate mail pending)",
}

_ERRORS = {
    400: "Invalid request (message says which field or rule)",
    401: "Missing, unknown, expired or revoked bearer token (or session cookie); a model API key is not"
    " accepted",
    403: "The caller's role does not allow this action, or a cookie request lacks its X-CSRF-Token",
    404: "Unknown id, or one of another organization",
    409: "Conflict with the current state (for single sign-on: server.public_url is not configured)",
    413: "Body larger than 64 KiB",
    429: "Too many failed attempts; see Retry-After",
}


def _op(
    summary: str,
    ok: tuple[int, str | None],
    *,
    errors: tuple[int, ...] = (400, 401),
    body: str | None = None,
    public: bool = False,
    roles: str | None = None,
    params: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    status, schema = ok
    description = summary if roles is None else f"{summary} ({roles} only)."
    op: dict[str, Any] = {"summary": summary, "description": description, "responses": {}}
    if public:
        op["security"] = []
    if params:
        op["parameters"] = list(params)
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    op["responses"][str(status)] = {"description": "Success"}
    if schema is not None:
        op["responses"][str(status)]["content"] = {"application/json": {"schema": _ref(schema)}}
    for code in sorted({*errors, *(() if body is None else (413,))}):
        op["responses"][str(code)] = {
            "description": _ERRORS[code],
            "content": {"application/json": {"schema": _ref("Error")}},
        }
    return op


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": _STR}


def _query_param(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


_ADMIN = "owner/admin"
_AUTH_ERRORS = (400, 401, 403)


def _redirect(summary: str, target: str, errors: tuple[int, ...], **kwargs: Any) -> dict[str, Any]:
    op = _op(summary, (302, None), errors=errors, public=True, **kwargs)
    op["responses"]["302"] = {
        "description": f"Redirect to {target}",
        "headers": {"Location": {"schema": _STR}},
    }
    return op


_SSO_CALLBACK = _redirect(
    "Finish a single sign-on: redirect to [cabinet] cabinet_url with ?code= (one-time, 60 s) or ?error=",
    "the cabinet URL",
    (400, 409),
    params=(
        _query_param("code", _STR, "Authorization code from the identity provider"),
        _query_param("state", _STR, "State of the login, single use"),
        _query_param("error", _STR, "Error code from the identity provider"),
        _query_param("iss", _STR, "Issuer of the authorization response (RFC 9207)"),
    ),
)
# Without a cabinet URL configured, the callback answers in JSON instead of redirecting.
_SSO_CALLBACK["responses"]["200"] = {
    "description": "No cabinet_url configured: the one-time code as JSON",
    "content": {"application/json": {"schema": _ref("OidcLoginCode")}},
}

PATHS: dict[str, dict[str, Any]] = {
    "/auth/register": {
        "post": _op(
            "Register an organization and its owner ([cabinet] registration: open, invite_only or closed)",
            (201, "AuthResponse"),
            body="RegisterRequest",
            public=True,
            errors=(400, 403, 409),
        ),
    },
    "/auth/login": {
        "post": _op(
            "Log in with e-mail and password",
            (200, "AuthResponse"),
            body="LoginRequest",
            public=True,
            errors=(400, 401, 429),
        ),
    },
    "/auth/session": {"get": _op("The current session", (200, "Session"))},
    "/auth/sign-in-options": {
        "get": _op(
            "What a sign-in page shows: the gateway's version, the registration mode, the self-service plans,"
            " and the single sign-on providers of the e-mail's domain",
            (200, "SignInOptions"),
            public=True,
            errors=(400,),
            params=(
                _query_param(
                    "email",
                    _STR,
                    "An e-mail address: the providers that allow its domain are listed (none without it)",
                ),
            ),
        ),
    },
    "/auth/logout": {"post": _op("End the current session", (200, "Ok"))},
    "/auth/password": {
        "post": _op(
            "Change the password (or set the first one) and end the user's other sessions",
            (200, "PasswordChanged"),
            body="PasswordChangeRequest",
            errors=(400, 401, 429),
        ),
    },
    "/auth/oidc/providers": {
        "post": _op(
            "Add an OIDC identity provider; the client secret is accepted here and never returned",
            (201, "OidcProvider"),
            body="OidcProviderRequest",
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 409),
        ),
        "get": _op(
            "The organization's identity providers",
            (200, "OidcProviderList"),
            roles=_ADMIN,
            errors=_AUTH_ERRORS,
        ),
    },
    "/auth/oidc/providers/{id}": {
        "parameters": [_path_param("id")],
        "get": _op("One identity provider", (200, "OidcProvider"), roles=_ADMIN, errors=(*_AUTH_ERRORS, 404)),
        "patch": _op(
            "Change an identity provider; a new issuer needs discovery again",
            (200, "OidcProvider"),
            body="OidcProviderUpdate",
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 404, 409),
        ),
        "delete": _op(
            "Delete an identity provider", (200, "OidcProvider"), roles=_ADMIN, errors=(*_AUTH_ERRORS, 404)
        ),
    },
    "/auth/oidc/providers/{id}/discover": {
        "parameters": [_path_param("id")],
        "post": _op(
            "Fetch and check the provider's discovery document and JWKS; store the endpoints",
            (200, "OidcDiscovery"),
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 404, 409),
        ),
    },
    "/auth/oidc/{providerId}/login": {
        "parameters": [_path_param("providerId")],
        "get": _redirect(
            "Start a single sign-on: redirect to the provider with state, nonce and PKCE S256",
            "the identity provider's authorization endpoint",
            (404, 409, 429),
        ),
    },
    "/auth/oidc/callback": {"get": _SSO_CALLBACK},
    "/auth/oidc/exchange": {
        "post": _op(
            "Exchange the one-time code of a single sign-on for a session token",
            (200, "AuthResponse"),
            body="OidcExchangeRequest",
            public=True,
            errors=(400,),
        ),
    },
    "/members": {"get": _op("The organization's members", (200, "MemberList"))},
    "/members/{userId}": {
        "parameters": [_path_param("userId")],
        "patch": _op(
            "Change a member's role",
            (200, "Member"),
            body="RoleChangeRequest",
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 404, 409),
        ),
        "delete": _op("Remove a member", (200, "Member"), roles=_ADMIN, errors=(*_AUTH_ERRORS, 404, 409)),
    },
    "/invitations": {
        "post": _op(
            "Invite an e-mail with a role; the token is returned only here",
            (201, "InvitationCreated"),
            body="InvitationRequest",
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 409),
        ),
        "get": _op(
            "The organization's invitations", (200, "InvitationList"), roles=_ADMIN, errors=_AUTH_ERRORS
        ),
    },
    "/invitations/accept": {
        "post": _op(
            "Accept an invitation: the token alone signs in; a new account has no password until it sets one",
            (200, "InvitationAccepted"),
            body="InvitationAcceptRequest",
            public=True,
            errors=(400, 401, 409, 429),
        ),
    },
    "/invitations/{id}/revoke": {
        "parameters": [_path_param("id")],
        "post": _op(
            "Revoke a pending invitation", (200, "Invitation"), roles=_ADMIN, errors=(*_AUTH_ERRORS, 404)
        ),
    },
    "/organization/api-keys": {
        "post": _op(
            "Issue an API key for the model API; the secret is returned only here. budget, rpm, tpm and"
            " models write the key's own allow rule; members may create keys when membersCreateKeys is on",
            (201, "ApiKeyCreated"),
            body="ApiKeyRequest",
            roles="owner/admin, or a member when the organization allows",
            errors=_AUTH_ERRORS,
        ),
    },
    "/organization/api-keys/{keyId}/revoke": {
        "parameters": [_path_param("keyId")],
        "post": _op(
            "Revoke an API key, also in the model API", (200, "ApiKey"), roles=_ADMIN, errors=_AUTH_ERRORS
        ),
    },
    "/organization/management-keys": {
        "post": _op(
            "Issue a management key; the secret is returned only here",
            (201, "ManagementKeyCreated"),
            body="ManagementKeyRequest",
            roles="owner",
            errors=_AUTH_ERRORS,
        ),
        "get": _op(
            "The organization's management keys",
            (200, "ManagementKeyList"),
            roles="owner",
            errors=_AUTH_ERRORS,
        ),
    },
    "/organization/management-keys/{id}/revoke": {
        "parameters": [_path_param("id")],
        "post": _op(
            "Revoke a management key", (200, "ManagementKey"), roles="owner", errors=(*_AUTH_ERRORS, 404)
        ),
    },
    "/systems": {
        "post": _op(
            "Create a system",
            (201, "System"),
            body="SystemRequest",
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 409),
        ),
        "get": _op("The organization's systems", (200, "SystemList")),
    },
    "/systems/{id}": {
        "parameters": [_path_param("id")],
        "get": _op("One system", (200, "System"), errors=(401, 404)),
        "patch": _op(
            "Rename or describe a system",
            (200, "System"),
            body="SystemUpdateRequest",
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 404, 409),
        ),
        "delete": _op(
            "Delete a system no active key is linked to",
            (200, "System"),
            roles=_ADMIN,
            errors=(*_AUTH_ERRORS, 404, 409),
        ),
    },
    "/overview": {
        "get": _op("Organization, caller, members, API keys, systems and billing", (200, "Overview"))
    },
    "/audit-log": {
        "get": _op(
            "The audit log, newest first",
            (200, "AuditPage"),
            roles=_ADMIN,
            errors=_AUTH_ERRORS,
            params=(
                _query_param("limit", {"type": "integer", "minimum": 1, "maximum": 200}, "Page size"),
                _query_param("cursor", _STR, "nextCursor of the previous page (with the same filters)"),
                _query_param(
                    "event",
                    _AUDIT_FILTER,
                    'An event name, or a prefix ending in "." (`content_policy.`: all content-policy events)',
                ),
                _query_param("ruleId", _AUDIT_FILTER, "Entries whose target is this policy rule"),
                _query_param("keyId", _AUDIT_FILTER, "Entries about requests of this API key"),
                _query_param("systemId", _AUDIT_FILTER, "Entries about requests of this system's keys"),
                _query_param(
                    "route",
                    _AUDIT_FILTER,
                    "Entries about requests on this model API route: its name (`chat_completions`) or its"
                    " path as a client writes it (`/v1/chat/completions`)",
                ),
                _query_param(
                    "actor", _AUDIT_FILTER, "Entries by this actor: a user's e-mail, or an actor id"
                ),
                _query_param("from", {"type": "string", "format": "date"}, "First UTC day (included)"),
                _query_param("to", {"type": "string", "format": "date"}, "Last UTC day (included)"),
                _query_param(
                    "format",
                    {"type": "string", "enum": ["json", "csv"]},
                    "csv: every matching entry (up to 100,000, newest first) as a CSV file, names beside"
                    " ids; cells that start like a formula are prefixed with an apostrophe",
                ),
            ),
        ),
    },
    "/openapi.json": {"get": _op("This document", (200, None), public=True, errors=())},
}

_MEMBER = _obj(
    ("id", "email", "role"),
    id=_STR,
    email=_STR,
    role=_ROLE,
    emailVerified={"type": "boolean"},
    createdAt=_TIME,
)
_INVITATION = _obj(
    ("id", "organizationId", "email", "role", "status"),
    id=_STR,
    organizationId=_STR,
    email=_STR,
    role=_ROLE,
    status={"type": "string", "enum": ["pending", "accepted", "revoked", "expired"]},
    createdAt=_TIME,
    expiresAt=_TIME,
    acceptedAt=_NULLABLE_TIME,
    revokedAt=_NULLABLE_TIME,
    invitedBy=_NULLABLE_STR,
)
_API_KEY = _obj(
    ("id", "organizationId", "alias", "ownerEmail", "systemId", "status"),
    id=_STR,
    organizationId=_STR,
    alias=_STR,
    ownerEmail=_STR,
    systemId=_NULLABLE_STR,
    status=_STATUS,
)
_MANAGEMENT_KEY = _obj(
    ("id", "organizationId", "name", "status", "secretHint"),
    id=_STR,
    organizationId=_STR,
    name=_STR,
    status=_STATUS,
    secretHint=_STR,
    createdAt=_TIME,
    revokedAt=_NULLABLE_TIME,
)
_SYSTEM = _obj(
    ("id", "organizationId", "name", "description"),
    id=_STR,
    organizationId=_STR,
    name=_STR,
    description=_STR,
    createdAt=_TIME,
)
_ORGANIZATION = _obj(("id", "legalName", "planCode"), id=_STR, legalName=_STR, planCode=_STR, createdAt=_TIME)
_CALLER = _obj(
    ("email", "role"),
    id=_NULLABLE_STR,
    email=_STR,
    role=_ROLE,
    kind={"type": "string", "enum": ["session", "management_key"]},
    emailVerified={"type": ["boolean", "null"], "description": "null for a management key"},
    passwordSet={"type": ["boolean", "null"], "description": "null for a management key"},
)

_STR_LIST = {"type": "array", "items": _STR}
_OIDC_SETTINGS = {
    "name": _STR,
    "issuer": {"type": "string", "description": "Exactly as the provider's discovery document names it"},
    "clientId": _STR,
    "clientSecret": {"type": "string", "writeOnly": True},
    "tokenAuthMethod": {"type": "string", "enum": ["client_secret_basic", "client_secret_post"]},
    "scopes": {**_STR_LIST, "description": "Must include openid; default openid, email, profile"},
    "allowedDomains": {**_STR_LIST, "minItems": 1, "description": "E-mail domains that may sign in"},
    "defaultRole": {"type": "string", "enum": ["member", "admin"], "description": "Role of new users"},
    "autoProvision": {"type": "boolean", "description": "Create unknown users on first login; default false"},
    "assumePkceS256": {
        "type": "boolean",
        "description": "Use PKCE S256 although discovery does not list it (Entra ID); default false",
    },
}
_OIDC_ENDPOINTS = _obj(
    ("authorizationEndpoint", "tokenEndpoint", "jwksUri", "idTokenSigningAlgs"),
    authorizationEndpoint=_STR,
    tokenEndpoint=_STR,
    jwksUri=_STR,
    userinfoEndpoint=_NULLABLE_STR,
    idTokenSigningAlgs=_STR_LIST,
)
_OIDC_PROVIDER = _obj(
    ("id", "organizationId", "name", "issuer", "clientId", "discovered"),
    id=_STR,
    organizationId=_STR,
    **{k: v for k, v in _OIDC_SETTINGS.items() if k != "clientSecret"},
    discovered={"type": "boolean"},
    endpoints={"oneOf": [_OIDC_ENDPOINTS, {"type": "null"}]},
    loginUrl=_NULLABLE_STR,
    discoveredAt=_NULLABLE_TIME,
    createdAt=_TIME,
    updatedAt=_TIME,
)
_OIDC_DISCOVERY = {
    "allOf": [
        _OIDC_ENDPOINTS,
        _obj(
            ("providerId", "issuer"),
            providerId=_STR,
            issuer=_STR,
            codeChallengeMethod={"type": "string", "enum": ["S256"]},
            signingKeys={"type": "integer"},
            redirectUri={**_NULLABLE_STR, "description": "Register this redirect URI at the provider"},
            discoveredAt=_TIME,
        ),
    ]
}

# With `format=csv` the audit log answers a CSV file.
PATHS["/audit-log"]["get"]["responses"]["200"]["content"]["text/csv"] = {"schema": {"type": "string"}}
PATHS["/auth/register"]["post"]["responses"]["403"]["description"] = (
    "Registration is closed, or invite_only and no valid invitation token for this e-mail was given"
)
PATHS["/auth/register"]["post"]["responses"]["202"] = {
    "description": "An unverified account holds the address: the registration completes when the link sent"
    " to the address is followed (POST /auth/verify-email)",
    "content": {"application/json": {"schema": _ref("RegistrationWaiting")}},
}


def _with_secret(schema: dict[str, Any], field: str = "secret") -> dict[str, Any]:
    return {"allOf": [schema, _obj((field,), **{field: _STR})]}


SCHEMAS: dict[str, Any] = {
    "Error": _obj(("error",), error=_STR),
    "Ok": _obj(("ok",), ok={"type": "boolean"}),
    "RegisterRequest": _obj(
        ("legalName", "email", "password"),
        legalName=_STR,
        email=_STR,
        password={"type": "string", "minLength": 10},
        planCode={
            "type": "string",
            "description": "Required without invitationToken, and then only a self_service plan",
        },
        invitationToken={
            "type": "string",
            "description": "An operator's registration invitation for this e-mail; it brings the plan",
        },
    ),
    "LoginRequest": _obj(("email", "password"), email=_STR, password=_STR),
    "AuthResponse": _obj(("token", "email"), token=_STR, email=_STR, csrfToken=_CSRF_TOKEN),
    "SignInOptions": _obj(
        ("name", "version", "registration", "currency", "plans", "providers"),
        name=_STR,
        version=_STR,
        registration={"type": "string", "enum": ["open", "invite_only", "closed"]},
        currency=_STR,
        plans={
            "type": "array",
            "description": "The plans self-registration may choose",
            "items": _obj(
                ("code", "name", "monthlyFeeMicros"),
                code=_STR,
                name=_STR,
                monthlyFeeMicros={"type": "integer"},
            ),
        },
        providers={
            "type": "array",
            "description": "Discovered identity providers that allow the e-mail's domain"
            " (none without server.public_url)",
            "items": _obj(("id", "name", "loginUrl"), id=_STR, name=_STR, loginUrl=_STR),
        },
        emailDelivery=_DELIVERY,
    ),
    "PasswordChangeRequest": _obj(
        ("newPassword",),
        currentPassword={"type": "string", "description": "Required unless the account has no password yet"},
        newPassword={"type": "string", "minLength": 10},
    ),
    "PasswordChanged": _obj(
        ("ok", "endedSessions"), ok={"type": "boolean"}, endedSessions={"type": "integer"}
    ),
    "Session": _obj(
        ("kind", "user", "organization"),
        kind=_CALLER["properties"]["kind"],
        user=_CALLER,
        organization=_ORGANIZATION,
        expiresAt=_NULLABLE_TIME,
        csrfToken=_CSRF_TOKEN,
    ),
    "Member": _MEMBER,
    "MemberList": _obj(("members",), members={"type": "array", "items": _ref("Member")}),
    "RoleChangeRequest": _obj(("role",), role=_ROLE),
    "InvitationRequest": _obj(("email", "role"), email=_STR, role=_ROLE),
    "Invitation": _INVITATION,
    # The token goes to the invited address only (by e-mail, or the operator): never in this answer.
    "InvitationCreated": {"allOf": [_ref("Invitation"), _obj(("delivery",), delivery=_DELIVERY)]},
    "InvitationList": _obj(("invitations",), invitations={"type": "array", "items": _ref("Invitation")}),
    "InvitationAcceptRequest": _obj(
        ("token",),
        token=_STR,
        password={
            "type": "string",
            "minLength": 10,
            "description": "Optional: set for a new account, checked for an existing member",
        },
    ),
    "InvitationAccepted": _obj(
        ("token", "email", "passwordSet"),
        token=_STR,
        email=_STR,
        csrfToken=_CSRF_TOKEN,
        passwordSet={
            "type": "boolean",
            "description": "false: no password yet (set one with POST /auth/password, or use SSO)",
        },
    ),
    "ApiKeyRequest": _obj(
        ("alias",),
        alias=_STR,
        ownerEmail={"type": "string", "description": "A member of the organization; the caller by default"},
        systemId=_STR,
        budget={"type": ["object", "null"], "description": "The key's own budget: {amountMicros, period}"},
        rpm={"type": ["integer", "null"]},
        tpm={"type": ["integer", "null"]},
        models={
            "type": ["array", "null"],
            "items": _STR,
            "description": "Patterns of the models the key may use",
        },
    ),
    "ApiKey": _API_KEY,
    "ApiKeyCreated": _with_secret(_ref("ApiKey")),
    "ManagementKeyRequest": _obj(("name",), name=_STR),
    "ManagementKey": _MANAGEMENT_KEY,
    "ManagementKeyCreated": _with_secret(_ref("ManagementKey")),
    "ManagementKeyList": _obj(
        ("managementKeys",), managementKeys={"type": "array", "items": _ref("ManagementKey")}
    ),
    "SystemRequest": _obj(("name",), name=_STR, description=_STR),
    "SystemUpdateRequest": _obj((), name=_STR, description=_STR),
    "System": _SYSTEM,
    "SystemList": _obj(("systems",), systems={"type": "array", "items": _ref("System")}),
    "Overview": _obj(
        ("organization", "user", "members", "apiKeys", "systems", "billing"),
        organization=_ORGANIZATION,
        user=_CALLER,
        members={"type": "array", "items": _ref("Member")},
        apiKeys={"type": "array", "items": _ref("ApiKey")},
        systems={"type": "array", "items": _ref("System")},
        billing=_ref("BillingOverview"),
    ),
    "OidcProviderRequest": _obj(
        ("name", "issuer", "clientId", "clientSecret", "allowedDomains"), **_OIDC_SETTINGS
    ),
    "OidcProviderUpdate": _obj((), **_OIDC_SETTINGS),
    "OidcProvider": _OIDC_PROVIDER,
    "OidcProviderList": _obj(("providers",), providers={"type": "array", "items": _ref("OidcProvider")}),
    "OidcDiscovery": _OIDC_DISCOVERY,
    "OidcExchangeRequest": _obj(("code",), code=_STR),
    "OidcLoginCode": _obj(("code", "expiresIn"), code=_STR, expiresIn={"type": "integer"}),
    "AuditEntry": _obj(
        ("id", "event", "actor", "createdAt"),
        id=_STR,
        event=_STR,
        targetId=_NULLABLE_STR,
        keyId=_NULLABLE_STR,
        systemId=_NULLABLE_STR,
        route=_NULLABLE_STR,
        details={"type": "object"},
        names={"type": "object", "additionalProperties": _STR},
        createdAt=_TIME,
        actor=_obj(("type",), type=_STR, id=_NULLABLE_STR, email=_NULLABLE_STR),
    ),
    "AuditPage": _obj(
        ("entries", "nextCursor"),
        entries={"type": "array", "items": _ref("AuditEntry")},
        nextCursor=_NULLABLE_STR,
    ),
}


def openapi_document(public_url: str = "") -> dict[str, Any]:
    """The document, with the server URL of the deployment when one is configured."""
    # The billing part builds on the helpers above, so it is imported here rather than at the top.
    from modelgate.cabinet.openapi_billing import BILLING_PATHS, BILLING_SCHEMAS, OPERATOR_SECURITY_SCHEMES
    from modelgate.cabinet.openapi_domains import DOMAIN_PATHS, DOMAIN_SCHEMAS
    from modelgate.cabinet.openapi_identity import IDENTITY_PATHS, IDENTITY_SCHEMAS
    from modelgate.cabinet.openapi_keys import KEYS_PATHS, KEYS_SCHEMAS
    from modelgate.cabinet.openapi_meters import METER_PATHS, METER_SCHEMAS
    from modelgate.cabinet.openapi_requests import REQUEST_PATHS, REQUEST_SCHEMAS

    paths = {
        **PATHS,
        **BILLING_PATHS,
        **DOMAIN_PATHS,
        **IDENTITY_PATHS,
        **REQUEST_PATHS,
        **METER_PATHS,
        **KEYS_PATHS,
    }
    schemas = {
        **SCHEMAS,
        **BILLING_SCHEMAS,
        **DOMAIN_SCHEMAS,
        **IDENTITY_SCHEMAS,
        **REQUEST_SCHEMAS,
        **METER_SCHEMAS,
        **KEYS_SCHEMAS,
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "modelgate cabinet API", "version": "1"},
        "servers": [{"url": public_url.rstrip("/") or "/"}],
        "security": [{"bearer": []}, {"sessionCookie": []}],
        "paths": {PREFIX + path: item for path, item in paths.items()},
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A session token or a management key (sk-mgmt-…); model keys are refused.",
                },
                "sessionCookie": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "mg_session",
                    "description": "The web cabinet's session (HttpOnly, SameSite=Strict, Path=/api), set"
                    " by a sign-in from a page of this gateway; requests that change state also need"
                    " X-CSRF-Token. Used only without an Authorization header.",
                },
                **OPERATOR_SECURITY_SCHEMES,
            },
        },
    }


async def openapi_handler(request: web.Request) -> web.Response:
    """GET /openapi.json."""
    return json_response(openapi_document(services_of(request).config.server.public_url))
