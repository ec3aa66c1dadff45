"""Single-use links sent to an address: verification, password reset, address change, and a registration that
waits for its address. Only the SHA-256 of a link's token is stored; it works once, until it expires."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from modelgate.cabinet.mail import Letter, Mail
from modelgate.cabinet.requests import CabinetError
from modelgate.domain.tokens import hash_token, new_id, new_opaque_token
from modelgate.storage.database import Executor

PURPOSES = ("verify", "register", "change", "reset")
_COLUMNS = "id, purpose, email, user_id, payload, requested_from, created_at, expires_at, used_at"


@dataclass(frozen=True, slots=True)
class EmailLink:
    """A link as stored (without its token)."""

    id: str
    purpose: str
    email: str
    user_id: str | None
    payload: dict[str, Any]
    requested_from: str | None
    created_at: float
    expires_at: float
    used_at: float | None


def _link(row: Any) -> EmailLink:
    values = dict(row)
    values["payload"] = orjson.loads(values["payload"]) if values["payload"] else {}
    return EmailLink(**values)


async def issue_link(
    tx: Executor,
    purpose: str,
    email: str,
    *,
    user_id: str | None,
    at: float,
    ttl_seconds: float,
    requested_from: str | None,
    payload: dict[str, Any] | None = None,
) -> tuple[str, float]:
    """Store a new link; returns its token (kept nowhere but in the message) and when it expires."""
    token = new_opaque_token()
    expires_at = at + ttl_seconds
    await tx.execute(
        f"INSERT INTO email_links ({_COLUMNS}, token_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9)",
        new_id("link"),
        purpose,
        email,
        user_id,
        orjson.dumps(payload).decode() if payload else None,
        requested_from,
        at,
        expires_at,
        hash_token(token),
    )
    return token, expires_at


async def send_link(
    tx: Executor,
    mail: Mail,
    letter: Letter,
    *,
    user_id: str | None,
    at: float,
    ttl_seconds: float,
    requested_from: str | None,
    payload: dict[str, Any] | None = None,
) -> None:
    """Issue a link of the letter's kind to its recipient and queue the letter carrying it."""
    token, expires_at = await issue_link(
        tx,
        letter.kind,
        letter.to,
        user_id=user_id,
        at=at,
        ttl_seconds=ttl_seconds,
        requested_from=requested_from,
        payload=payload,
    )
    await mail.queue(tx, letter, token, at, expires_at)


def _invalid() -> CabinetError:
    # One answer for unknown, used and expired links: a guesser learns nothing.
    return CabinetError(400, "this link is not valid: it was used, it expired, or it never existed")


async def usable_link(ex: Executor, token: str, purposes: tuple[str, ...], at: float) -> EmailLink:
    """The link of a token: 400 unless it exists, has one of `purposes`, is unused and unexpired."""
    row = await ex.fetchrow(f"SELECT {_COLUMNS} FROM email_links WHERE token_hash = $1", hash_token(token))
    if row is None:
        raise _invalid()
    link = _link(row)
    if link.purpose not in purposes or link.used_at is not None or link.expires_at <= at:
        raise _invalid()
    return link


async def redeem_link(tx: Executor, token: str, purposes: tuple[str, ...], at: float) -> EmailLink:
    """Use a link (inside the transaction that acts on it), as `usable_link` checks it; a concurrent use of
    the same link loses."""
    link = await usable_link(tx, token, purposes, at)
    used = await tx.execute(
        "UPDATE email_links SET used_at = $1 WHERE id = $2 AND used_at IS NULL", at, link.id
    )
    if used != 1:
        raise _invalid()
    return link


async def links_sent_since(ex: Executor, email: str, requested_from: str | None, since: float) -> int:
    """How many links went to this address, or were asked for from this client address, since `since`."""
    count = await ex.fetchval(
        "SELECT COUNT(*) FROM email_links WHERE created_at > $1 AND (email = $2 OR requested_from = $3)",
        since,
        email,
        requested_from or "",
    )
    return int(count or 0)


async def end_links_of(tx: Executor, user_id: str, purpose: str, at: float) -> None:
    """Unused links of a user for one purpose stop working (a newer one, or the password changed)."""
    await tx.execute(
        "UPDATE email_links SET used_at = $1 WHERE user_id = $2 AND purpose = $3 AND used_at IS NULL",
        at,
        user_id,
        purpose,
    )


async def end_every_link_of(tx: Executor, user_id: str, at: float) -> None:
    """Every unused link of a user stops working (the account is gone)."""
    await tx.execute(
        "UPDATE email_links SET used_at = $1 WHERE user_id = $2 AND used_at IS NULL", at, user_id
    )
