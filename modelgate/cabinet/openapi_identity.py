"""The identity part of the OpenAPI document: links sent to an address (verification, address change, a
registration that waits for its address), password reset, the accept page's invitation details and the
operator's view of the mail outbox. Merged by `cabinet.openapi.openapi_document`, like the billing part."""

from __future__ import annotations

from typing import Any

from modelgate.cabinet.openapi import _DELIVERY, _NULLABLE_STR, _ROLE, _STR, _TIME, _obj, _op
from modelgate.cabinet.openapi_billing import _operator_op

_TOKEN = {"type": "string", "description": "The token of the link sent to the address (#/…?token=…)"}
_PASSWORD = {"type": "string", "minLength": 10}

IDENTITY_PATHS: dict[str, Any] = {
    "/auth/verify-email": {
        "post": _op(
            "Follow a link sent to an address: verifies the account's address, moves the account to a new"
            " address, or finishes a registration that waited for its address (201, signed in)",
            (200, "AddressVerified"),
            body="LinkRequest",
            public=True,
            errors=(400, 409),
        ),
    },
    "/auth/verify-email/send": {
        "post": _op(
            "Send a new verification link to the caller's own address",
            (202, "LinkSent"),
            errors=(400, 401, 409, 429),
        ),
    },
    "/auth/email": {
        "post": _op(
            "Move the account to another address: a link goes there; the account moves when it is followed",
            (202, "LinkSent"),
            body="AddressChangeRequest",
            errors=(400, 401, 409, 429),
        ),
    },
    "/auth/password-reset": {
        "post": _op(
            "Ask for a password reset link; the answer is the same whether or not the address has an account",
            (202, "PasswordResetRequested"),
            body="PasswordResetRequest",
            public=True,
            errors=(400,),
        ),
    },
    "/auth/password-reset/confirm": {
        "post": _op(
            "Set a new password with a reset link; every session of the account ends",
            (200, "PasswordReset"),
            body="PasswordResetConfirm",
            public=True,
            errors=(400,),
        ),
    },
    "/invitations/details": {
        "post": _op(
            "What an invitation offers, for the accept page: organization, role, who invited, until when",
            (200, "InvitationDetails"),
            body="LinkRequest",
            public=True,
            errors=(400,),
        ),
    },
    "/operator/mail": {
        "get": _operator_op(
            "Messages not yet sent whose link still works, with their links", (200, "MailList")
        ),
    },
}

IDENTITY_SCHEMAS: dict[str, Any] = {
    "LinkRequest": _obj(("token",), token=_TOKEN),
    "AddressVerified": _obj(("email", "emailVerified"), email=_STR, emailVerified={"type": "boolean"}),
    "LinkSent": _obj(("email", "delivery"), email=_STR, delivery=_DELIVERY),
    "AddressChangeRequest": _obj(
        ("newEmail",),
        newEmail=_STR,
        currentPassword={"type": "string", "description": "Required when the account has a password"},
    ),
    "PasswordResetRequest": _obj(("email",), email=_STR),
    "PasswordResetRequested": _obj(("delivery", "message"), delivery=_DELIVERY, message=_STR),
    "PasswordResetConfirm": _obj(("token", "newPassword"), token=_TOKEN, newPassword=_PASSWORD),
    "PasswordReset": _obj(("email", "endedSessions"), email=_STR, endedSessions={"type": "integer"}),
    "RegistrationWaiting": _obj(
        ("email", "delivery", "pending"), email=_STR, delivery=_DELIVERY, pending=_STR
    ),
    "InvitationDetails": _obj(
        ("email", "role", "organization", "invitedBy", "expiresAt"),
        email=_STR,
        role=_ROLE,
        organization=_obj(("legalName",), legalName=_STR),
        invitedBy=_NULLABLE_STR,
        expiresAt=_TIME,
    ),
    "MailList": _obj(
        ("mail",),
        mail={
            "type": "array",
            "items": _obj(
                ("id", "kind", "to", "transport", "status", "attempts", "link"),
                id=_STR,
                kind={"type": "string", "enum": ["invitation", "verify", "register", "change", "reset"]},
                organizationId=_NULLABLE_STR,
                to=_STR,
                subject=_STR,
                transport={"type": "string", "enum": ["smtp", "operator"]},
                status={"type": "string", "enum": ["pending"]},
                attempts={"type": "integer"},
                lastError=_NULLABLE_STR,
                nextAttemptAt=_TIME,
                createdAt=_TIME,
                expiresAt=_TIME,
                sentAt={"type": ["string", "null"], "format": "date-time"},
                link=_STR,
            ),
        },
    ),
}
