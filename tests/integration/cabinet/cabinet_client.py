"""A small driver for the cabinet API over real HTTP, so tests read as the behaviour they check."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp.test_utils import TestClient
from multidict import CIMultiDictProxy

from modelgate.cabinet.clock import now
from modelgate.cabinet.mail_outbox import waiting_mail
from modelgate.storage import Database
from modelgate.storage.database import Executor
from tests.support.mail_links import token_of_link

PASSWORD = "correct horse battery"
_numbers = itertools.count(1)


def unique_email(prefix: str = "user") -> str:
    """A fresh e-mail address for this test run."""
    return f"{prefix}{next(_numbers)}@example.com"


@dataclass(frozen=True, slots=True)
class Reply:
    """One HTTP answer of the cabinet."""

    status: int
    body: Any
    headers: CIMultiDictProxy[str]
    raw: bytes


@dataclass(frozen=True, slots=True)
class Account:
    """A logged-in user: the session token, the e-mail and the password."""

    token: str
    email: str
    password: str = PASSWORD


class RecordingSink:
    """A KeyRevocationSink that records what it is told, or fails when asked to."""

    def __init__(self) -> None:
        self.revoked: list[str] = []
        self.status_seen_in_transaction: list[str] = []
        self.fail_with: Exception | None = None

    async def key_revoked(self, secret_hash: str, tx: Executor) -> None:
        # Inside the revoke transaction the key already reads as revoked; nothing is committed yet.
        status = await tx.fetchval("SELECT status FROM api_keys WHERE secret_hash = $1", secret_hash)
        self.status_seen_in_transaction.append(status)
        if self.fail_with is not None:
            raise self.fail_with
        self.revoked.append(secret_hash)


class Cabinet:
    """The cabinet API of one test server, with shortcuts for the common set-up steps."""

    def __init__(self, client: TestClient, db: Database, sink: RecordingSink) -> None:
        self.client = client
        self.db = db
        self.sink = sink

    async def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        data: bytes | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """Send a request to `/api{path}` and decode the JSON answer."""
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if json is not None:
            data = orjson.dumps(json)
            sent.setdefault("Content-Type", "application/json")
        async with self.client.request(method, f"/api{path}", data=data, headers=sent) as resp:
            raw = await resp.read()
            body = orjson.loads(raw) if raw and resp.content_type == "application/json" else None
            return Reply(resp.status, body, resp.headers, raw)

    async def register(
        self,
        email: str | None = None,
        *,
        legal_name: str = "Acme Ltd",
        plan: str = "pro",
        password: str = PASSWORD,
    ) -> Account:
        """Register a new organization and return its logged-in owner."""
        email = email or unique_email("owner")
        reply = await self.call(
            "POST",
            "/auth/register",
            json={"legalName": legal_name, "email": email, "password": password, "planCode": plan},
        )
        assert reply.status == 201, reply.body
        return Account(reply.body["token"], reply.body["email"], password)

    async def login(self, email: str, password: str = PASSWORD) -> Reply:
        """POST /auth/login."""
        return await self.call("POST", "/auth/login", json={"email": email, "password": password})

    async def invite(self, inviter: Account, role: str = "member", email: str | None = None) -> Reply:
        """POST /invitations."""
        return await self.call(
            "POST",
            "/invitations",
            token=inviter.token,
            json={"email": email or unique_email(role), "role": role},
        )

    async def invite_delivered(
        self, inviter: Account, role: str = "member", email: str | None = None
    ) -> dict[str, Any]:
        """Invite someone; returns the 201 body with the `token` the invited address received."""
        reply = await self.invite(inviter, role, email)
        assert reply.status == 201, reply.body
        assert "token" not in reply.body  # the inviter never holds it
        return {**reply.body, "token": await self.link_sent_to(reply.body["email"], "invitation")}

    async def verify_address(self, account: Account) -> None:
        """Follow the verification link sent to the account's address (registration sends one)."""
        token = await self.link_sent_to(account.email, "verify")
        reply = await self.call("POST", "/auth/verify-email", json={"token": token})
        assert reply.status == 200, reply.body

    async def link_sent_to(self, email: str, kind: str) -> str:
        """The token of the newest `kind` link the outbox holds for `email` (what the operator reads with
        `modelgate mail pending` when there is no `[email]`)."""
        return await newest_link_token(self.db, email, kind)

    async def add_member(self, inviter: Account, role: str = "member", password: str = PASSWORD) -> Account:
        """Invite someone with a role and accept the invitation; returns the new member logged in."""
        invitation = await self.invite(inviter, role)
        assert invitation.status == 201, invitation.body
        token = await self.link_sent_to(invitation.body["email"], "invitation")
        accepted = await self.call("POST", "/invitations/accept", json={"token": token, "password": password})
        assert accepted.status == 200, accepted.body
        return Account(accepted.body["token"], accepted.body["email"], password)

    async def session(self, account: Account) -> dict[str, Any]:
        """GET /auth/session of an account."""
        reply = await self.call("GET", "/auth/session", token=account.token)
        assert reply.status == 200, reply.body
        return reply.body

    async def organization_id(self, account: Account) -> str:
        """The id of the account's organization."""
        return (await self.session(account))["organization"]["id"]

    async def user_id(self, account: Account) -> str:
        """The user id of the account."""
        return (await self.session(account))["user"]["id"]

    async def create_key(self, account: Account | str, alias: str | None = None, **fields: Any) -> Reply:
        """POST /organization/api-keys with a session token or a management key."""
        token = account if isinstance(account, str) else account.token
        body = {"alias": alias or f"key-{next(_numbers)}", **fields}
        return await self.call("POST", "/organization/api-keys", token=token, json=body)

    async def revoke_key(self, account: Account | str, key_id: str) -> Reply:
        """POST /organization/api-keys/{keyId}/revoke."""
        token = account if isinstance(account, str) else account.token
        return await self.call("POST", f"/organization/api-keys/{key_id}/revoke", token=token)

    async def create_system(self, account: Account, name: str | None = None, **fields: Any) -> Reply:
        """POST /systems."""
        return await self.call(
            "POST",
            "/systems",
            token=account.token,
            json={"name": name or f"system-{next(_numbers)}", **fields},
        )

    async def create_management_key(self, owner: Account, name: str = "automation") -> Reply:
        """POST /organization/management-keys."""
        return await self.call(
            "POST", "/organization/management-keys", token=owner.token, json={"name": name}
        )

    async def audit_events(self, account: Account, limit: int = 200) -> list[dict[str, Any]]:
        """The newest audit entries of the account's organization."""
        reply = await self.call("GET", f"/audit-log?limit={limit}", token=account.token)
        assert reply.status == 200, reply.body
        return reply.body["entries"]


async def newest_link_token(db: Database, email: str, kind: str) -> str:
    """The token of the newest waiting `kind` message to `email` in the outbox (read as the operator does)."""
    waiting = [m for m in await waiting_mail(db, now()) if m.to_address == email and m.kind == kind]
    assert waiting, f"no {kind} link waits for {email}"
    link = waiting[-1].link
    assert link is not None
    return token_of_link(link)


async def delete_organization_row(db: Database, organization_id: str) -> None:
    """Remove an organization's row behind the foreign keys' back (its users and keys stay)."""
    if db.dialect == "sqlite":
        await db.execute("PRAGMA foreign_keys=OFF")
        try:
            await db.execute("DELETE FROM organizations WHERE id = $1", organization_id)
        finally:
            await db.execute("PRAGMA foreign_keys=ON")
    else:
        async with db.transaction() as tx:
            await tx.execute("SET LOCAL session_replication_role = replica")
            await tx.execute("DELETE FROM organizations WHERE id = $1", organization_id)
