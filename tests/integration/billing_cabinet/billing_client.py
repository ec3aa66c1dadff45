"""The cabinet driver of tests/integration/cabinet, extended with policy rules, the operator API, the
usage ledger and a billing sink that records what it is told."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from aiohttp.test_utils import TestClient

from modelgate.config import Config, load_config
from modelgate.domain.events import BalanceEvent
from modelgate.domain.tokens import new_id
from modelgate.domain.usage_days import UsageDays
from modelgate.storage import Database
from tests.integration.cabinet.cabinet_client import (
    PASSWORD,
    Account,
    Cabinet,
    RecordingSink,
    Reply,
    unique_email,
)

OPERATOR_TOKEN = "operator-secret-for-tests-0123456789"
_numbers = itertools.count(1)


def billing_config(
    operator_token: str | None = OPERATOR_TOKEN, *, cabinet: dict[str, Any] | None = None, **server: Any
) -> Config:
    """The embedded default config with an operator token (or none), other `[server]` settings and
    `[cabinet]` settings."""
    config = load_config(None)
    return replace(
        config,
        server=replace(config.server, operator_token=operator_token, **server),
        cabinet=replace(config.cabinet, **(cabinet or {})),
    )


class RecordingBillingSink:
    """A BillingSink that records each call with what a separate read of the database saw at that moment.

    The read goes around any open transaction: on SQLite it would wait for the transaction's lock (and time
    out), on PostgreSQL it would not see uncommitted rows. So a recorded value proves the call came after
    the commit.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self.credited: list[tuple[str, int]] = []
        self.balances_seen: list[int] = []
        self.policy_changes: list[str] = []
        self.rule_counts_seen: list[int] = []
        self.plan_changes: list[tuple[str, str]] = []

    async def balance_changed(self, event: BalanceEvent) -> None:
        balance = await asyncio.wait_for(
            self.db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", event.organization_id),
            5,
        )
        self.credited.append((event.organization_id, event.amount_micros))
        self.balances_seen.append(int(balance))

    async def policy_changed(self, organization_id: str) -> None:
        count = await asyncio.wait_for(
            self.db.fetchval("SELECT COUNT(*) FROM policy_rules WHERE organization_id = $1", organization_id),
            5,
        )
        self.policy_changes.append(organization_id)
        self.rule_counts_seen.append(int(count))

    async def plan_changed(self, organization_id: str) -> None:
        plan = await asyncio.wait_for(
            self.db.fetchval("SELECT plan_code FROM organizations WHERE id = $1", organization_id), 5
        )
        self.plan_changes.append((organization_id, plan))


class BillingCabinet(Cabinet):
    """A cabinet server with the billing sink and shortcuts for rules, the operator API and the ledger."""

    def __init__(
        self, client: TestClient, db: Database, sink: RecordingSink, billing: RecordingBillingSink
    ) -> None:
        super().__init__(client, db, sink)
        self.billing = billing

    async def create_rule(self, account: Account | str, **fields: Any) -> Reply:
        """POST /policy-rules; an organization allow rule for every model unless fields say otherwise."""
        token = account if isinstance(account, str) else account.token
        body = {"subjectType": "organization", "effect": "allow", "models": ["*"], **fields}
        return await self.call("POST", "/policy-rules", token=token, json=body)

    async def operator(
        self, method: str, path: str, *, token: str | None = OPERATOR_TOKEN, json: Any = None
    ) -> Reply:
        """A call of the operator API (`/api/operator{path}`) with the operator token by default."""
        return await self.call(method, f"/operator{path}", token=token, json=json)

    async def invite_organization(self, email: str, plan: str) -> str:
        """An operator's registration invitation for `email` on `plan`; returns its token."""
        reply = await self.operator(
            "POST", "/registration-invitations", json={"email": email, "planCode": plan}
        )
        assert reply.status == 201, reply.body
        return reply.body["token"]

    async def register_invited(self, plan: str, *, legal_name: str = "Invited Ltd") -> Account:
        """Register on `plan` with an operator's invitation, as a plan closed to self-registration needs."""
        email = unique_email("invited")
        token = await self.invite_organization(email, plan)
        reply = await self.call(
            "POST",
            "/auth/register",
            json={"legalName": legal_name, "email": email, "password": PASSWORD, "invitationToken": token},
        )
        assert reply.status == 201, reply.body
        return Account(reply.body["token"], reply.body["email"])

    async def open_invoice_id(self, account: Account) -> str:
        """The id of the organization's registration invoice."""
        reply = await self.call("GET", "/invoices", token=account.token)
        assert reply.status == 200, reply.body
        return reply.body["invoices"][-1]["id"]

    async def balance(self, organization_id: str) -> int:
        """The stored balance of an organization."""
        return int(
            await self.db.fetchval("SELECT balance_micros FROM organizations WHERE id = $1", organization_id)
        )


async def insert_usage(
    db: Database,
    organization_id: str,
    at: float,
    *,
    model: str = "gpt-4o",
    key_id: str | None = None,
    system_id: str | None = None,
    input_tokens: int = 0,
    cached_input_tokens: int = 0,
    output_tokens: int = 0,
    cost_micros: int = 0,
) -> None:
    """One ledger row, and its share of the daily sums, as the ledger's flush writes them."""
    async with db.transaction() as tx:
        await tx.execute(
            "INSERT INTO usage_ledger (id, organization_id, key_id, system_id, model, row_key, request_id,"
            " status, input_tokens, cached_input_tokens, output_tokens, units, cost_micros, created_at)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            new_id("use"),
            organization_id,
            key_id,
            system_id,
            model,
            "mock:test",
            f"req-{next(_numbers)}",
            200,
            input_tokens,
            cached_input_tokens,
            output_tokens,
            0.0,
            cost_micros,
            at,
        )
        days = UsageDays()
        tokens = (input_tokens, cached_input_tokens, output_tokens)
        days.add(organization_id, at, model, key_id, system_id, 200, tokens, cost_micros)
        await days.write(tx)


BillingCabinetFactory = Callable[..., Awaitable[BillingCabinet]]
